//! Keyframes that carry several ticks of a source, and series keys that
//! update by handle.

use super::*;

#[test]
fn a_keyframe_keeps_every_section_of_a_source_that_ticked_twice() {
    // A relay's first frame on a new link (a keyframe) may hold two ticks
    // of one source: the older one's samples must not vanish in it.
    let cfg = CodecConfig::default();
    let mut table = SeriesTable::new();
    let src = table.add_source("n1", 1000);
    let l = Labels::metric("ticks_total", [("node", "n1")]);
    let h = table.insert(SeriesEntry {
        labels: l.clone(),
        source: src,
        encoding: Encoding::CounterInt,
        value: 9.0,
    });
    if let Some(s) = table.source_mut(src) {
        s.last_ts_ms = 9000;
    }
    let mut cs = Changeset::new(9500);
    cs.new_sources.push(src);
    cs.defs.push(h);
    // As a merger writes it: a heartbeat at the newest first, then each tick.
    for (ts, ups) in [
        (9000, vec![]),
        (8000, vec![(h, 8.0)]),
        (9000, vec![(h, 9.0)]),
    ] {
        cs.sections.push(ChangeSection {
            source: src,
            ts_ms: ts,
            updates: ups,
            retired: Vec::new(),
        });
    }
    let mut enc = LinkEncoder::new(&cfg).expect("encoder");
    let payload = encode_payload(&mut enc, &table, &cs);
    let mut dec = LinkDecoder::new(&cfg).expect("decoder");
    let f = dec.decode(&payload).expect("decode");
    assert!(f.keyframe);
    let mut got: Vec<(i64, f64)> = f
        .sections
        .iter()
        .flat_map(|s| s.updates.iter().map(move |u| (s.ts_ms, u.1)))
        .collect();
    got.sort_by_key(|g| g.0);
    assert_eq!(got, vec![(8000, 8.0), (9000, 9.0)]);
    assert_eq!(dec.value(h), Some(9.0), "the newest value stays");
    // And the link goes on: delta frames after it decode.
    for t in 10..14 {
        let ts = t * 1000;
        if let Some(e) = table.get_mut(h) {
            e.value = t as f64;
        }
        let mut cs = Changeset::new(ts);
        cs.sections.push(ChangeSection {
            source: src,
            ts_ms: ts,
            updates: vec![(h, t as f64)],
            retired: Vec::new(),
        });
        let f = dec
            .decode(&encode_payload(&mut enc, &table, &cs))
            .expect("a delta after it decodes");
        assert_eq!(f.sections[0].updates, vec![(h, t as f64)]);
    }
}

#[test]
fn series_keys_update_by_handle_and_go_stale_when_the_series_is_retired() {
    let mut tx = Sender::new(BoundsPolicy::default());
    let src = tx.source("n1", 1000);
    let tick = |tx: &mut Sender, t: i64| {
        tx.begin_tick(t);
        tx.tick_source(src, t);
    };
    tick(&mut tx, 0);
    let a = tx.observe(src, &g("m", 0), MetricKind::Gauge, 1.0);
    let b = tx.observe(src, &g("m", 1), MetricKind::Gauge, 2.0);
    assert_ne!(a, b);
    tx.finish_tick();
    tx.end_tick();
    // By key: the same series, its new value in the tick's changes.
    tick(&mut tx, 1000);
    assert!(tx.observe_key(a, 5.0));
    assert!(tx.observe_key(b, 2.0));
    let (table, cs) = tx.finish_tick();
    assert_eq!(table.len(), 2, "nothing retired: both were observed");
    assert_eq!(cs.sections[0].updates.len(), 1, "only the change of a");
    let (h, v) = cs.sections[0].updates[0];
    assert_eq!(table.get(h).map(|e| e.labels.clone()), Some(g("m", 0)));
    assert_eq!(v, 5.0);
    tx.end_tick();
    // A tick without `b` retires it; its handle is reused by a new series,
    // and the old key must not update that one.
    tick(&mut tx, 2000);
    assert!(tx.observe_key(a, 6.0));
    tx.finish_tick();
    tx.end_tick();
    tick(&mut tx, 3000);
    assert!(tx.observe_key(a, 7.0));
    let c = tx.observe(src, &g("m", 2), MetricKind::Gauge, 9.0);
    assert!(!tx.observe_key(b, 3.0), "b was retired");
    let (table, cs) = tx.finish_tick();
    assert_eq!(table.len(), 2);
    assert!(
        cs.sections[0].updates.iter().all(|&(_, v)| v != 3.0),
        "{:?}",
        cs.sections[0].updates
    );
    tx.end_tick();
    // Observing by labels again gives a fresh, working key.
    tick(&mut tx, 4000);
    let b2 = tx.observe(src, &g("m", 1), MetricKind::Gauge, 4.0);
    assert!(tx.observe_key(c, 9.0) && tx.observe_key(a, 7.0));
    assert_ne!(b2, b);
    let (table, _) = tx.finish_tick();
    assert_eq!(table.len(), 3);
}

#[test]
fn a_source_tag_stays_until_the_source_is_redefined() {
    // A merger caches its global handle of a source in the decoder's record
    // of it: the tag must survive ordinary frames and go with a
    // redefinition (the id may mean another source now).
    let cfg = CodecConfig::default();
    let mut table = SeriesTable::new();
    let src = table.add_source("n1", 1000);
    let h = table.insert(SeriesEntry {
        labels: Labels::metric("ticks_total", [("node", "n1")]),
        source: src,
        encoding: Encoding::CounterInt,
        value: 1.0,
    });
    let mut enc = LinkEncoder::new(&cfg).expect("encoder");
    let mut dec = LinkDecoder::new(&cfg).expect("decoder");
    let mut send = |table: &SeriesTable, cs: &Changeset, dec: &mut LinkDecoder| {
        dec.decode(&encode_payload(&mut enc, table, cs))
            .expect("decode")
    };
    for t in 1..6_i64 {
        if let Some(e) = table.get_mut(h) {
            e.value = t as f64;
        }
        let mut cs = Changeset::new(t * 1000);
        if t == 1 {
            cs.new_sources.push(src);
            cs.defs.push(h);
        }
        if t == 4 {
            // Redefined: the same id, another name.
            if let Some(s) = table.source_mut(src) {
                s.name = "n2".into();
            }
            cs.new_sources.push(src);
        }
        cs.sections.push(ChangeSection {
            source: src,
            ts_ms: t * 1000,
            updates: vec![(h, t as f64)],
            retired: Vec::new(),
        });
        let f = send(&table, &cs, &mut dec);
        let tag = dec.source(src).map(RxSource::tag);
        match t {
            1 => assert_eq!(tag, Some(0), "no tag before one is set"),
            2 | 3 | 5 => assert_eq!(tag, Some(77), "frame {t} keeps the tag"),
            _ => {
                assert_eq!(f.new_sources, vec![src]);
                assert_eq!(tag, Some(0), "a redefinition clears the tag");
            }
        }
        dec.set_source_tag(src, 77);
    }
    dec.set_source_tag(src + 1, 5); // no such source: no-op
    assert!(dec.source(src + 1).is_none());
}
