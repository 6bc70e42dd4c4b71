// The series of `snapshot_v1.bin`: included by `gen_snapshot_v1.rs`, which
// wrote the file, and by the store's snapshot tests, which read it back and
// check every sample against these.

/// A metric name, its source index + 1 (0: none), and its samples.
pub(crate) type SeriesV1 = (&'static str, u64, Vec<(i64, f64)>);

/// The series, in the order the snapshot holds them.
pub(crate) fn v1_series() -> Vec<SeriesV1> {
    // An integral counter over two chunks (240 sealed + 60 open), with
    // millisecond jitter and one gap.
    let counter = (0..300i64)
        .map(|i| {
            let ts = i * 1000 + (i % 3) + if i >= 200 { 5_000 } else { 0 };
            (ts, (i * 40_960 + i % 7) as f64)
        })
        .collect();
    // Floats of every kind the old XOR/int form had to carry.
    let odd = [
        1.5,
        f64::NAN,
        -0.0,
        0.0,
        1e300,
        f64::from_bits(0x7ff0_0000_0000_0002), // staleness marker
        f64::INFINITY,
        -3.0,
        9e15,
        -9e15,
        0.1 + 0.2,
        f64::MIN_POSITIVE,
    ];
    let mixed = (0..60i64)
        .map(|i| {
            let v = match i {
                0..12 => odd[i as usize],
                12..36 => i as f64 * 0.01,
                _ => (i as f64).sqrt(),
            };
            (1_000 + i * 500, v)
        })
        .collect();
    // A steady gauge: the same value every tick.
    let steady = (0..10i64).map(|i| (i * 1000, 5.0)).collect();
    vec![
        ("v1_counter", 1, counter),
        ("v1_mixed", 0, mixed),
        ("v1_steady", 0, steady),
    ]
}
