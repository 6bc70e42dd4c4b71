//! Criterion benches of the codec: encode and decode throughput, in samples
//! per second on one core, on the reference trace when it is present
//! (`CANOPY_TRACE`, else `../shared/traces/node-exporter-1s-a.prom.zst`),
//! else on a trace from the node simulator.

use std::path::PathBuf;

use canopy_benches::{trace, wire};
use canopy_proto::codec::{BoundsPolicy, CodecConfig};
use criterion::{Criterion, Throughput, criterion_group, criterion_main};

fn load() -> Vec<trace::Scrape> {
    let path = std::env::var_os("CANOPY_TRACE")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(env!("CARGO_MANIFEST_DIR"))
                .join("../../shared/traces/node-exporter-1s-a.prom.zst")
        });
    match trace::read_file(&path) {
        Ok(t) => t,
        Err(_) => canopy_benches::simtrace::generate("sim-node", 600),
    }
}

fn codec(c: &mut Criterion) {
    let scrapes = load();
    let cfg = CodecConfig::default();
    let samples = wire::sample_count(&scrapes);
    let Ok(bytes) = wire::encode(&scrapes, &cfg, BoundsPolicy::default()) else {
        return;
    };
    let mut g = c.benchmark_group("codec");
    g.throughput(Throughput::Elements(samples));
    g.sample_size(20);
    g.bench_function("encode", |b| {
        b.iter(|| wire::encode(&scrapes, &cfg, BoundsPolicy::default()).map(|w| w.len()))
    });
    g.bench_function("decode", |b| {
        b.iter(|| wire::decode(&bytes, &cfg).map(|d| d.len()))
    });
    g.finish();
}

criterion_group!(benches, codec);
criterion_main!(benches);
