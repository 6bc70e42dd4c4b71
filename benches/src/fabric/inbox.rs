//! The gateway's inbox on disk: what the subtree tops (and any child that
//! failed over to the gateway) delivered, with arrival times, so that the
//! gateway alone can be run again over the very same records
//! (`fabric-sim --save-inbox F`, then `--gateway-from F` with the same
//! settings). A profiler (callgrind, perf) then sees the gateway's work
//! without the leaves and relays around it, which take ~99 % of a run.
//!
//! The format is private to the simulator: a header line naming the
//! settings the records depend on (a replay with other settings is
//! refused), then the segments, little-endian, each length bounded.

use std::io::{BufReader, BufWriter, Read, Write};
use std::path::Path;

use super::stream::{Rec, Segment};
use super::timing::Dest;
use super::{FabricError, SimConfig};

const MAGIC: &[u8; 8] = b"CNPYGWI1";

/// Largest record the loader accepts (the simulator's frame cap).
const MAX_REC: u64 = 1 << 30;

/// The settings that decide which records the gateway gets.
fn fingerprint(cfg: &SimConfig) -> String {
    format!(
        "nodes={} subtrees={} replicas={} ticks={} tick_ms={} latency={} seed={} phase={:?} \
         stagger={} jitter={} cpus={} change={} kill={:?} failover={} warmup={:?} zstd={} window={}",
        cfg.nodes,
        cfg.subtrees,
        cfg.replicas,
        cfg.ticks,
        cfg.tick_ms,
        cfg.link_latency_ms,
        cfg.seed,
        cfg.phase,
        cfg.stagger_ms,
        cfg.jitter_ms,
        cfg.cpus,
        cfg.change_fraction,
        cfg.kill,
        cfg.failover_ms,
        cfg.warmup_ticks,
        cfg.codec.zstd_level,
        cfg.codec.window_log,
    )
}

fn io(e: std::io::Error) -> FabricError {
    FabricError::Inbox(e.to_string())
}

/// Writes the gateway's inputs of a run with settings `cfg` to `path`.
pub fn save(path: &Path, cfg: &SimConfig, segs: &[Segment]) -> Result<(), FabricError> {
    let mut w = BufWriter::new(std::fs::File::create(path).map_err(io)?);
    let fp = fingerprint(cfg);
    w.write_all(MAGIC).map_err(io)?;
    put_bytes(&mut w, fp.as_bytes())?;
    put_u64(&mut w, segs.len() as u64)?;
    for s in segs {
        put_u64(&mut w, s.from as u64)?;
        w.write_all(&[s.conn.0]).map_err(io)?;
        put_u64(&mut w, u64::from(s.conn.1))?;
        match s.dest {
            Dest::Gateway => put_u64(&mut w, u64::MAX)?,
            Dest::Node(j) => put_u64(&mut w, j as u64)?,
        }
        put_u64(&mut w, s.recs.len() as u64)?;
        for r in &s.recs {
            put_u64(&mut w, r.at_ms as u64)?;
            put_bytes(&mut w, &r.payload)?;
        }
    }
    w.flush().map_err(io)
}

/// Reads what [`save`] wrote, refusing a file of other settings than `cfg`.
pub fn load(path: &Path, cfg: &SimConfig) -> Result<Vec<Segment>, FabricError> {
    let mut r = BufReader::new(std::fs::File::open(path).map_err(io)?);
    let mut magic = [0u8; 8];
    r.read_exact(&mut magic).map_err(io)?;
    if &magic != MAGIC {
        return Err(FabricError::Inbox("not a gateway inbox file".into()));
    }
    let fp = get_bytes(&mut r, 4096)?;
    if fp != fingerprint(cfg).as_bytes() {
        return Err(FabricError::Inbox(format!(
            "saved with other settings: {}",
            String::from_utf8_lossy(&fp)
        )));
    }
    let n = get_u64(&mut r)?;
    let mut segs = Vec::new();
    for _ in 0..n {
        let from = usize::try_from(get_u64(&mut r)?).map_err(|_| bad())?;
        let mut out = [0u8; 1];
        r.read_exact(&mut out).map_err(io)?;
        let conn = u32::try_from(get_u64(&mut r)?).map_err(|_| bad())?;
        let dest = match get_u64(&mut r)? {
            u64::MAX => Dest::Gateway,
            j => Dest::Node(usize::try_from(j).map_err(|_| bad())?),
        };
        let k = get_u64(&mut r)?;
        let mut recs = Vec::new();
        for _ in 0..k {
            let at_ms = get_u64(&mut r)? as i64;
            let payload = get_bytes(&mut r, MAX_REC)?;
            recs.push(Rec { at_ms, payload });
        }
        segs.push(Segment {
            from,
            conn: (out[0], conn),
            dest,
            recs,
        });
    }
    Ok(segs)
}

fn bad() -> FabricError {
    FabricError::Inbox("field out of range".into())
}

fn put_u64(w: &mut impl Write, v: u64) -> Result<(), FabricError> {
    w.write_all(&v.to_le_bytes()).map_err(io)
}

fn put_bytes(w: &mut impl Write, b: &[u8]) -> Result<(), FabricError> {
    put_u64(w, b.len() as u64)?;
    w.write_all(b).map_err(io)
}

fn get_u64(r: &mut impl Read) -> Result<u64, FabricError> {
    let mut b = [0u8; 8];
    r.read_exact(&mut b).map_err(io)?;
    Ok(u64::from_le_bytes(b))
}

fn get_bytes(r: &mut impl Read, max: u64) -> Result<Vec<u8>, FabricError> {
    let n = get_u64(r)?;
    if n > max {
        return Err(FabricError::Inbox(format!("a field of {n} bytes")));
    }
    let mut v = Vec::new();
    r.take(n).read_to_end(&mut v).map_err(io)?;
    if v.len() as u64 != n {
        return Err(FabricError::Inbox("cut off".into()));
    }
    Ok(v)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What is saved loads back the same, and only under the same settings.
    #[test]
    fn round_trips_and_checks_settings() {
        let dir = std::env::temp_dir().join(format!("canopy-inbox-{}", std::process::id()));
        let cfg = SimConfig::default();
        let segs = vec![
            Segment {
                from: 3,
                conn: (1, 2),
                dest: Dest::Gateway,
                recs: vec![
                    Rec {
                        at_ms: 1002,
                        payload: vec![1, 2, 3],
                    },
                    Rec {
                        at_ms: -5,
                        payload: Vec::new(),
                    },
                ],
            },
            Segment {
                from: 0,
                conn: (0, 0),
                dest: Dest::Node(7),
                recs: Vec::new(),
            },
        ];
        save(&dir, &cfg, &segs).expect("saved");
        let back = load(&dir, &cfg).expect("loaded");
        assert_eq!(back.len(), 2);
        assert_eq!(
            (back[0].from, back[0].conn, back[0].dest),
            (3, (1, 2), Dest::Gateway)
        );
        assert_eq!(back[0].recs[0].payload, vec![1, 2, 3]);
        assert_eq!(
            (back[0].recs[1].at_ms, back[0].recs[1].payload.len()),
            (-5, 0)
        );
        assert_eq!((back[1].dest, back[1].recs.len()), (Dest::Node(7), 0));
        let other = SimConfig {
            nodes: 5,
            ..SimConfig::default()
        };
        assert!(matches!(load(&dir, &other), Err(FabricError::Inbox(_))));
        let _ = std::fs::remove_file(&dir);
    }
}
