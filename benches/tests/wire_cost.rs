//! `wire-cost` end to end on a simulator trace: encode, decode, check.

use canopy_benches::{simtrace, trace, wire};
use canopy_proto::codec::{BoundsPolicy, CodecConfig};

#[test]
fn simulated_trace_round_trips_within_bounds() {
    let scrapes = simtrace::generate("n001", 300);
    let cfg = CodecConfig::default();
    let bytes = wire::encode(&scrapes, &cfg, BoundsPolicy::default()).expect("encode");
    let decoded = wire::decode(&bytes, &cfg).expect("decode");
    assert_eq!(decoded.len(), scrapes.len());
    let r = wire::check(&scrapes, &decoded, &BoundsPolicy::default());
    assert_eq!(r.samples, wire::sample_count(&scrapes));
    assert_eq!(r.violations, 0, "{:?}", r.examples);
    assert_eq!(r.monotonic_violations, 0);
    assert_eq!(r.shape_mismatches, 0);
}

#[test]
fn decoded_text_parses_back_to_the_same_values() {
    let scrapes = simtrace::generate("n002", 30);
    let cfg = CodecConfig::default();
    let bytes = wire::encode(&scrapes, &cfg, BoundsPolicy::default()).expect("encode");
    let decoded = wire::decode(&bytes, &cfg).expect("decode");
    let mut text = String::new();
    for (ts, s) in &decoded {
        trace::write_scrape(&mut text, *ts, s);
    }
    let back = trace::parse(&text).expect("parse");
    assert_eq!(back.len(), decoded.len());
    for (b, (ts, d)) in back.iter().zip(&decoded) {
        assert_eq!(b.ts_ms, *ts);
        let vals: Vec<f64> = b.samples.iter().map(|s| s.2).collect();
        let want: Vec<f64> = d.iter().map(|s| s.1).collect();
        assert_eq!(vals, want);
    }
}
