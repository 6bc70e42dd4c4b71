//! Skipped copies (see `dupes`): a merger that skips the other path's
//! proven copies of quiet sections tells its sink exactly what a merger
//! applying every copy in full does, keeps the same counts, and does skip.

use super::*;

/// Both mergers, fed alike.
struct Pair {
    skip: Merger,
    full: Merger,
    ss: RecSink,
    sf: RecSink,
}

impl Pair {
    fn new(hole_wait_ms: i64) -> Self {
        let c = MergeConfig {
            hole_wait_ms,
            ..mcfg()
        };
        Self {
            skip: Merger::new(c.clone()),
            full: Merger::new(c).without_skips(),
            ss: RecSink::default(),
            sf: RecSink::default(),
        }
    }

    fn connect(&mut self, c: ChildId) {
        self.skip.child_connected(c).unwrap();
        self.full.child_connected(c).unwrap();
    }

    fn gone(&mut self, c: ChildId) {
        self.skip.child_gone(c);
        self.full.child_gone(c);
    }

    fn feed(&mut self, c: ChildId, p: &[u8]) {
        let a = self.skip.on_record(c, p, &mut self.ss).unwrap();
        let b = self.full.on_record(c, p, &mut self.sf).unwrap();
        assert_eq!(a, b, "frame summaries");
    }

    /// Panics unless both mergers hold the same paths for every source,
    /// once the skipping one applied its due notes (on a copy of its
    /// state: they stay due, as they would without the check).
    fn same_paths(&mut self) {
        let kept = (self.skip.table.clone(), self.skip.recent.clone());
        self.skip.flush_paths();
        let paths = |m: &Merger| {
            m.table
                .sources()
                .map(|(h, _)| (h, m.table.source_mark(h).map(|x| x.paths.clone())))
                .collect::<Vec<_>>()
        };
        assert_eq!(paths(&self.skip), paths(&self.full), "paths");
        (self.skip.table, self.skip.recent) = kept;
    }

    fn tick(&mut self, now: i64) {
        self.same_paths();
        for (m, s) in [
            (&mut self.skip, &mut self.ss),
            (&mut self.full, &mut self.sf),
        ] {
            m.expire(now, s);
            let _ = m.take_changeset(now);
            m.end_tick();
        }
    }

    /// Panics unless both told their sinks the same, in the same order,
    /// and counted the same; returns the updates skipped.
    fn check(&mut self) -> u64 {
        self.same_paths();
        same(&self.ss.samples, &self.sf.samples);
        assert_eq!(self.ss.heartbeats, self.sf.heartbeats);
        assert_eq!(self.ss.retires, self.sf.retires);
        let mut a = self.skip.stats().clone();
        let b = self.full.stats();
        assert_eq!(b.copies_skipped, 0);
        let skipped = std::mem::take(&mut a.copies_skipped);
        assert_eq!(&a, b, "stats");
        assert_eq!(self.skip.held_records(), self.full.held_records());
        skipped
    }
}

/// Node `n`'s readings at tick `k`, by `mode`: 0, 1: its tick counter
/// (series 1) moves by one, series 0 too when 1; 2: the counter stalls
/// (observed unchanged) and series 0 moves alone; 3: the counter is
/// missing (retired, defined again later). Series 2 is missing (retired,
/// then defined again) when `gap`.
fn readings(k: usize, mode: u8, gap: bool, st: &mut (f64, f64)) -> Vec<(usize, f64)> {
    if mode != 0 {
        st.0 += 1.5;
    }
    if mode != 2 {
        st.1 += 1.0;
    }
    let mut v = vec![(0, st.0)];
    if mode != 3 || k == 0 {
        v.push((1, st.1));
    }
    if !gap {
        v.push((2, 7.0));
    }
    v
}

/// One scenario: `nodes` quiet nodes with two paths each, path 1
/// `lag` ticks behind, arrivals shuffled within a tick by `jitter`; when
/// `lose` is set, path 0 of node 0 loses that tick's frame and fails over
/// to a new link (keyframe first) the tick after. Returns the updates
/// skipped.
#[allow(clippy::too_many_arguments)]
fn scenario(
    nodes: usize,
    ticks: usize,
    mode: &[u8],
    gap: &[bool],
    jitter: &[u8],
    lag: usize,
    lose: Option<usize>,
    hole_wait_ms: i64,
) -> u64 {
    let mut pair = Pair::new(hole_wait_ms);
    let mut leaves: Vec<Leaf> = (0..nodes).map(|n| Leaf::new(&format!("n{n}"), 2)).collect();
    let mut levels = vec![(0.0, 0.0); nodes];
    // Child ids: node * 10 + path; the failed-over link is 2.
    let mut events: Vec<(usize, u8, ChildId, Vec<u8>)> = Vec::new();
    for n in 0..nodes {
        for p in 0..2 {
            pair.connect(n as ChildId * 10 + p);
        }
    }
    let mut failed_over = false;
    for k in 0..ticks {
        for (n, leaf) in leaves.iter_mut().enumerate() {
            let i = k * nodes + n;
            if n == 0 && lose.is_some_and(|t| t + 1 == k) {
                leaf.encs.push(LinkEncoder::new(&cfg()).expect("encoder"));
                failed_over = true;
            }
            let obs = readings(
                k,
                mode[i % mode.len()],
                gap[i % gap.len()] && k > 0,
                &mut levels[n],
            );
            let recs = leaf.tick(1_000 + 1_000 * k as i64, &obs);
            let base = n as ChildId * 10;
            let j = jitter[i % jitter.len()];
            // Path 0: the old link until it is lost, then the new one.
            if n == 0 && failed_over {
                events.push((k, j, base + 2, recs[2].clone()));
            } else if !(n == 0 && lose == Some(k)) {
                events.push((k, j, base, recs[0].clone()));
            }
            events.push((k + lag, j.rotate_left(3), base + 1, recs[1].clone()));
        }
    }
    // Each link delivers in order: sort by arrival tick, then jitter, but
    // keep a link's own frames in sending order (stable, and a link's
    // frames share one lag).
    let mut order: Vec<usize> = (0..events.len()).collect();
    order.sort_by_key(|&i| (events[i].0, events[i].1));
    let mut sent: HashMap<ChildId, usize> = HashMap::new();
    let mut per_link: HashMap<ChildId, Vec<usize>> = HashMap::new();
    for (i, e) in events.iter().enumerate() {
        per_link.entry(e.2).or_default().push(i);
    }
    let mut connected_new = false;
    let mut tick = 0;
    for &i in &order {
        let (at, _, c, _) = &events[i];
        while tick < *at {
            tick += 1;
            pair.tick(1_000 + 1_000 * tick as i64);
        }
        // The link's next frame in sending order (the sort may have
        // swapped two of one link's frames within a tick).
        let k = sent.entry(*c).or_default();
        let idx = per_link[c][*k];
        *k += 1;
        if *c == 2 && !connected_new {
            pair.gone(0);
            pair.connect(2);
            connected_new = true;
        }
        let p = events[idx].3.clone();
        pair.feed(*c, &p);
    }
    pair.tick(1_000 + 1_000 * (tick as i64 + 1));
    pair.check()
}

/// In steady state every second copy of a quiet node's section is
/// skipped, and the sink sees what it sees without skipping.
#[test]
fn quiet_copies_are_skipped_and_change_nothing() {
    for hole_wait_ms in [0, 5_000] {
        let skipped = scenario(3, 12, &[0], &[false], &[0, 1, 2], 0, None, hole_wait_ms);
        // From the second tick on, one copy of each node's section a tick
        // carries its tick counter alone.
        assert!(skipped >= 3 * 9, "skipped {skipped} (wait {hole_wait_ms})");
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]
    /// Any mix of quiet and busy ticks, retirements, lag, shuffled
    /// arrivals and a failover: skipping changes nothing the sink sees
    /// or the merger counts.
    #[test]
    fn skipping_copies_changes_nothing(
        nodes in 1usize..4,
        ticks in 2usize..16,
        mode in proptest::collection::vec(prop_oneof![4 => Just(0u8), 2 => Just(1u8), 1 => Just(2u8), 1 => Just(3u8)], 1..40),
        gap in proptest::collection::vec(proptest::bool::weighted(0.15), 1..40),
        jitter in proptest::collection::vec(0u8..4, 1..16),
        lag in 0usize..3,
        lose in proptest::option::of(1usize..10),
        wait in prop_oneof![Just(0i64), Just(5_000i64)],
    ) {
        scenario(nodes, ticks, &mode, &gap, &jitter, lag, lose, wait);
    }
}
