//! The remote_write v1 body: protobuf `WriteRequest` in the snappy block
//! format. Decoding checks sizes before it allocates: the body length, then
//! the decompressed length snappy declares in its header.

use std::collections::HashMap;

use canopy_proto::model::Labels;
use canopy_proto::schema::remote::{Label, Sample as PbSample, TimeSeries, WriteRequest};
use prost::Message;

use super::RemoteWriteError;

/// Size limits applied to a remote_write body.
#[derive(Clone, Copy, Debug)]
pub struct WireLimits {
    /// Largest compressed body accepted, bytes (default 16 MiB).
    pub max_body_bytes: usize,
    /// Largest decompressed protobuf accepted, bytes (default 64 MiB).
    pub max_decoded_bytes: usize,
}

impl Default for WireLimits {
    fn default() -> Self {
        WireLimits {
            max_body_bytes: 16 << 20,
            max_decoded_bytes: 64 << 20,
        }
    }
}

/// Decodes a snappy-compressed protobuf `WriteRequest` within `limits`
/// (with prost: the reference the receiver's own reader is tested against).
pub fn decode(body: &[u8], limits: &WireLimits) -> Result<WriteRequest, RemoteWriteError> {
    let mut raw = Vec::new();
    let n = decompress_into(body, limits, &mut raw)?;
    WriteRequest::decode(raw.get(..n).unwrap_or_default())
        .map_err(|e| RemoteWriteError::Protobuf(e.to_string()))
}

/// Decompresses a snappy block body within `limits` into `buf` (reused:
/// it only grows) and returns the decompressed length, `buf[..len]`.
pub fn decompress_into(
    body: &[u8],
    limits: &WireLimits,
    buf: &mut Vec<u8>,
) -> Result<usize, RemoteWriteError> {
    if body.len() > limits.max_body_bytes {
        return Err(RemoteWriteError::BodyTooLarge {
            limit: limits.max_body_bytes,
        });
    }
    let claimed =
        snap::raw::decompress_len(body).map_err(|e| RemoteWriteError::Snappy(e.to_string()))?;
    if claimed > limits.max_decoded_bytes {
        return Err(RemoteWriteError::DecodedTooLarge {
            claimed,
            limit: limits.max_decoded_bytes,
        });
    }
    if buf.len() < claimed {
        buf.resize(claimed, 0);
    }
    let out = buf.get_mut(..claimed).unwrap_or_default();
    snap::raw::Decoder::new()
        .decompress(body, out)
        .map_err(|e| RemoteWriteError::Snappy(e.to_string()))
}

/// Protobuf-encodes and snappy-compresses `req` (a request body).
pub fn encode(req: &WriteRequest) -> Result<Vec<u8>, RemoteWriteError> {
    snap::raw::Encoder::new()
        .compress_vec(&req.encode_to_vec())
        .map_err(|e| RemoteWriteError::Snappy(e.to_string()))
}

/// The label set of a received series; rejects empty or repeated names.
pub fn labels_of(ts: &TimeSeries) -> Result<Labels, RemoteWriteError> {
    let mut seen: Vec<&str> = Vec::with_capacity(ts.labels.len());
    for l in &ts.labels {
        if l.name.is_empty() {
            return Err(RemoteWriteError::BadLabels("empty label name".into()));
        }
        if seen.contains(&l.name.as_str()) {
            return Err(RemoteWriteError::BadLabels(format!(
                "label {:?} given twice",
                l.name
            )));
        }
        seen.push(&l.name);
    }
    Ok(Labels::from_pairs(
        ts.labels
            .iter()
            .map(|l| (l.name.as_str(), l.value.as_str())),
    ))
}

/// Builds a request from `(labels, ts_ms, value)` samples, one `TimeSeries`
/// per label set, samples in the order given (callers pass them in time
/// order per series).
pub fn request_of<'a, I>(samples: I) -> WriteRequest
where
    I: IntoIterator<Item = (&'a Labels, i64, f64)>,
{
    let mut index: HashMap<&Labels, usize> = HashMap::new();
    let mut out: Vec<TimeSeries> = Vec::new();
    for (labels, ts, value) in samples {
        let i = *index.entry(labels).or_insert_with(|| {
            out.push(TimeSeries {
                labels: labels
                    .iter()
                    .map(|(n, v)| Label {
                        name: n.to_string(),
                        value: v.to_string(),
                    })
                    .collect(),
                samples: Vec::new(),
            });
            out.len() - 1
        });
        if let Some(s) = out.get_mut(i) {
            s.samples.push(PbSample {
                value,
                timestamp: ts,
            });
        }
    }
    WriteRequest { timeseries: out }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lab(n: &str) -> Labels {
        Labels::from_pairs([("__name__", "m"), ("node", n)])
    }

    #[test]
    fn round_trip_groups_by_series() {
        let (a, b) = (lab("a"), lab("b"));
        let req = request_of([(&a, 1, 1.0), (&b, 1, 2.0), (&a, 2, 3.0)]);
        let body = encode(&req).expect("encode");
        let back = decode(&body, &WireLimits::default()).expect("decode");
        assert_eq!(back, req);
        assert_eq!(back.timeseries.len(), 2);
        assert_eq!(back.timeseries[0].samples.len(), 2);
        assert_eq!(labels_of(&back.timeseries[1]).expect("labels"), b);
    }

    #[test]
    fn limits_apply_before_decompression() {
        let a = lab("a");
        let req = request_of((0..1000).map(|i| (&a, i, 0.0)));
        let body = encode(&req).expect("encode");
        let small = WireLimits {
            max_body_bytes: 1 << 20,
            max_decoded_bytes: 100,
        };
        assert!(matches!(
            decode(&body, &small),
            Err(RemoteWriteError::DecodedTooLarge { limit: 100, .. })
        ));
        let tiny = WireLimits {
            max_body_bytes: 10,
            max_decoded_bytes: 1 << 20,
        };
        assert!(matches!(
            decode(&body, &tiny),
            Err(RemoteWriteError::BodyTooLarge { limit: 10 })
        ));
        // A 5-byte header claiming ~4 GiB: refused from the header alone.
        let liar = [0xff, 0xff, 0xff, 0xff, 0x0f];
        assert!(matches!(
            decode(&liar, &WireLimits::default()),
            Err(RemoteWriteError::DecodedTooLarge { .. })
        ));
    }

    #[test]
    fn garbage_is_a_typed_error() {
        let l = WireLimits::default();
        assert!(matches!(
            decode(b"\x05not snappy at all", &l),
            Err(RemoteWriteError::Snappy(_))
        ));
        let junk = snap::raw::Encoder::new()
            .compress_vec(&[0xff; 64])
            .expect("compress");
        assert!(matches!(
            decode(&junk, &l),
            Err(RemoteWriteError::Protobuf(_))
        ));
        let dup = TimeSeries {
            labels: vec![
                Label {
                    name: "a".into(),
                    value: "1".into(),
                },
                Label {
                    name: "a".into(),
                    value: "2".into(),
                },
            ],
            samples: vec![],
        };
        assert!(matches!(
            labels_of(&dup),
            Err(RemoteWriteError::BadLabels(_))
        ));
    }
}
