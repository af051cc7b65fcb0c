//! What a claim key holds: first the claim of a running call, then its settled outcome,
//! so any pod's duplicate can replay it.
//!
//! ```text
//! tg1|P|<fingerprint, 32 hex>|<claim token>                 running (claimed by a pod)
//! tg1|R|<fingerprint, 32 hex>|A<status><interim><headers><body>   answered
//! tg1|R|<fingerprint, 32 hex>|F<ran><status><retryable><code>\n<recovery>\n<message>   failed
//! ```
//!
//! Integers are big-endian; header names and values are length-prefixed. `tg1` is the
//! format's version: a value of another version, or one that doesn't parse, reads as
//! [`Held::Foreign`], which callers treat as absent (never a crash, never a replay of
//! something we can't read). The fingerprint is the tool and canonical arguments, so an
//! `Idempotency-Key` reused for another call is caught on any pod.

use bytes::{BufMut, Bytes, BytesMut};
use http::{HeaderMap, HeaderName, HeaderValue, StatusCode};

use crate::limits::canonical::Key;
use crate::limits::dedupe::{Buffered, Ran, Settled};
use crate::vocab::{Code, Recovery, Reject};

const VERSION: &[u8] = b"tg1|";

/// A claim key's value, read.
#[derive(Debug)]
pub enum Held {
    Running {
        fingerprint: Key,
    },
    Settled {
        fingerprint: Key,
        settled: Settled,
    },
    /// Not ours, another version's, or damaged.
    Foreign,
}

/// The value a pod writes when it claims a call.
pub fn running(fingerprint: &Key, token: &str) -> Vec<u8> {
    let mut value = Vec::with_capacity(40 + token.len());
    value.extend_from_slice(VERSION);
    value.extend_from_slice(b"P|");
    value.extend_from_slice(hex::encode(fingerprint).as_bytes());
    value.push(b'|');
    value.extend_from_slice(token.as_bytes());
    value
}

/// The value a settled call leaves for its duplicates.
pub fn settled(fingerprint: &Key, settled: &Settled) -> Vec<u8> {
    let mut value = BytesMut::with_capacity(64);
    value.put_slice(VERSION);
    value.put_slice(b"R|");
    value.put_slice(hex::encode(fingerprint).as_bytes());
    value.put_u8(b'|');
    match settled {
        Settled::Answered(answer) => {
            value.put_u8(b'A');
            value.put_u16(answer.status.as_u16());
            value.put_u8(u8::from(answer.interim));
            value.put_u16(u16::try_from(answer.headers.len()).unwrap_or(u16::MAX));
            for (name, v) in answer.headers.iter().take(usize::from(u16::MAX)) {
                value.put_u16(u16::try_from(name.as_str().len()).unwrap_or(0));
                value.put_slice(name.as_str().as_bytes());
                value.put_u32(u32::try_from(v.len()).unwrap_or(0));
                value.put_slice(v.as_bytes());
            }
            value.put_slice(&answer.body);
        }
        Settled::Failed { reject, ran } => {
            value.put_u8(b'F');
            value.put_u8(match ran {
                Ran::No => 0,
                Ran::Maybe => 1,
                Ran::Yes => 2,
            });
            value.put_u16(reject.status.unwrap_or(0));
            value.put_u8(match reject.retryable {
                None => 0,
                Some(false) => 1,
                Some(true) => 2,
            });
            value.put_slice(reject.code.as_str().as_bytes());
            value.put_u8(b'\n');
            value.put_slice(reject.recovery.map_or("", |r| r.as_str()).as_bytes());
            value.put_u8(b'\n');
            value.put_slice(reject.message.as_bytes());
        }
    }
    value.to_vec()
}

/// Reads a claim key's value; anything unexpected is [`Held::Foreign`].
pub fn read(value: &[u8]) -> Held {
    parse(value).unwrap_or(Held::Foreign)
}

fn parse(value: &[u8]) -> Option<Held> {
    let rest = value.strip_prefix(VERSION)?;
    let (&kind, rest) = rest.split_first()?;
    let rest = rest.strip_prefix(b"|")?;
    let fingerprint: Key = hex::decode(rest.get(..32)?).ok()?.try_into().ok()?;
    let rest = rest.get(32..)?.strip_prefix(b"|")?;
    match kind {
        b'P' => Some(Held::Running { fingerprint }),
        b'R' => Some(Held::Settled {
            fingerprint,
            settled: outcome(rest)?,
        }),
        _ => None,
    }
}

fn outcome(value: &[u8]) -> Option<Settled> {
    let mut r = Reader(value);
    match r.u8()? {
        b'A' => {
            let status = StatusCode::from_u16(r.u16()?).ok()?;
            let interim = r.u8()? == 1;
            let count = r.u16()?;
            let mut headers = HeaderMap::with_capacity(usize::from(count));
            for _ in 0..count {
                let len = usize::from(r.u16()?);
                let name = HeaderName::from_bytes(r.take(len)?).ok()?;
                let len = usize::try_from(r.u32()?).ok()?;
                let value = HeaderValue::from_bytes(r.take(len)?).ok()?;
                headers.append(name, value);
            }
            Some(Settled::Answered(Buffered {
                status,
                headers,
                body: Bytes::copy_from_slice(r.0),
                interim,
            }))
        }
        b'F' => {
            let ran = match r.u8()? {
                0 => Ran::No,
                1 => Ran::Maybe,
                2 => Ran::Yes,
                _ => return None,
            };
            let status = r.u16()?;
            let retryable = match r.u8()? {
                0 => None,
                1 => Some(false),
                2 => Some(true),
                _ => return None,
            };
            let text = std::str::from_utf8(r.0).ok()?;
            let mut lines = text.splitn(3, '\n');
            let code = Code::parse(lines.next()?)?;
            let recovery = lines.next()?;
            let message = lines.next()?;
            let mut reject = Reject::new(code, message);
            reject.status = (status != 0).then_some(status);
            reject.retryable = retryable;
            reject.recovery = Recovery::parse(recovery);
            Some(Settled::Failed { reject, ran })
        }
        _ => None,
    }
}

struct Reader<'a>(&'a [u8]);

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        let (head, tail) = (self.0.get(..n)?, self.0.get(n..)?);
        self.0 = tail;
        Some(head)
    }

    fn u8(&mut self) -> Option<u8> {
        Some(self.take(1)?[0])
    }

    fn u16(&mut self) -> Option<u16> {
        Some(u16::from_be_bytes(self.take(2)?.try_into().ok()?))
    }

    fn u32(&mut self) -> Option<u32> {
        Some(u32::from_be_bytes(self.take(4)?.try_into().ok()?))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn outcomes_round_trip() {
        let fp = [3u8; 16];
        let mut headers = HeaderMap::new();
        headers.insert("content-type", HeaderValue::from_static("application/json"));
        headers.append("x-a", HeaderValue::from_static("1"));
        headers.append("x-a", HeaderValue::from_static("2"));
        let answered = Settled::Answered(Buffered {
            status: StatusCode::CREATED,
            headers,
            body: Bytes::from_static(b"{\"ok\":true}\n\x00\xff"),
            interim: false,
        });
        match read(&settled(&fp, &answered)) {
            Held::Settled {
                fingerprint,
                settled: Settled::Answered(b),
            } => {
                assert_eq!(fingerprint, fp);
                assert_eq!(b.status, StatusCode::CREATED);
                assert_eq!(b.headers.get_all("x-a").iter().count(), 2);
                assert_eq!(&b.body[..], b"{\"ok\":true}\n\x00\xff");
            }
            other => panic!("{other:?}"),
        }
        let failed = Settled::Failed {
            reject: Reject::new(Code::BackendTimeout, "slow\nvery")
                .with_retryable(false)
                .with_recovery(Recovery::Stop),
            ran: Ran::Maybe,
        };
        match read(&settled(&fp, &failed)) {
            Held::Settled {
                settled: Settled::Failed { reject, ran },
                ..
            } => {
                assert_eq!(ran, Ran::Maybe);
                assert_eq!(reject.code, Code::BackendTimeout);
                assert_eq!(reject.message, "slow\nvery");
                assert_eq!(reject.retryable, Some(false));
                assert_eq!(reject.recovery, Some(Recovery::Stop));
            }
            other => panic!("{other:?}"),
        }
        assert!(matches!(
            read(&running(&fp, "pod-1:7")),
            Held::Running { fingerprint } if fingerprint == fp
        ));
    }

    #[test]
    fn anything_else_is_foreign_never_a_panic() {
        let good = settled(
            &[1; 16],
            &Settled::Answered(Buffered {
                status: StatusCode::OK,
                headers: HeaderMap::new(),
                body: Bytes::new(),
                interim: false,
            }),
        );
        // Every truncation reads as something or nothing, without a panic.
        for n in 0..good.len() {
            let _ = read(&good[..n]);
        }
        for bad in [
            &b""[..],
            b"garbage",
            b"tg2|P|00000000000000000000000000000000|x",
            b"tg1|P|zz000000000000000000000000000000|x",
            b"tg1|R|00000000000000000000000000000000|A\x00",
            b"tg1|R|00000000000000000000000000000000|F\x01\x00\x00\x00NOT_A_CODE\n\nm",
            b"tg1|X|00000000000000000000000000000000|",
        ] {
            assert!(matches!(read(bad), Held::Foreign), "{bad:?}");
        }
    }
}
