//! Control records a parent sends down its link (the child reads them).
//!
//! ```text
//! ack = 0x41 ('A') | count (LEB128 u64)
//! ```
//! `count`: records of this link the parent has taken for good, from the
//! link's first record on (cumulative, so a lost or late ack costs nothing).

const ACK: u8 = b'A';

/// A control message from a parent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Control {
    /// The first `count` records of the link are taken for good.
    Ack(u64),
}

impl Control {
    /// The message's payload bytes.
    pub fn encode(&self) -> Vec<u8> {
        match *self {
            Control::Ack(count) => {
                let mut out = vec![ACK];
                let mut n = count;
                loop {
                    let b = (n & 0x7f) as u8;
                    n >>= 7;
                    if n == 0 {
                        out.push(b);
                        break;
                    }
                    out.push(b | 0x80);
                }
                out
            }
        }
    }

    /// Parses one payload; `None` for anything malformed or unknown.
    pub fn decode(payload: &[u8]) -> Option<Control> {
        let (&kind, rest) = payload.split_first()?;
        if kind != ACK || rest.is_empty() || rest.len() > 10 {
            return None;
        }
        let mut n: u64 = 0;
        for (i, &b) in rest.iter().enumerate() {
            let bits = u64::from(b & 0x7f);
            if i == 9 && bits > 1 {
                return None;
            }
            n |= bits << (7 * i);
            if b & 0x80 == 0 {
                return (i + 1 == rest.len()).then_some(Control::Ack(n));
            }
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn acks_round_trip() {
        for n in [0, 1, 127, 128, 300, u64::from(u32::MAX), u64::MAX] {
            assert_eq!(
                Control::decode(&Control::Ack(n).encode()),
                Some(Control::Ack(n))
            );
        }
    }

    #[test]
    fn garbage_is_refused() {
        for bad in [
            &b""[..],
            b"A",
            b"X\x01",
            b"A\x80",
            b"A\x01\x02",
            b"A\xff\xff\xff\xff\xff\xff\xff\xff\xff\x7f",
            b"A\x80\x80\x80\x80\x80\x80\x80\x80\x80\x80\x01",
        ] {
            assert_eq!(Control::decode(bad), None, "{bad:?}");
        }
    }
}
