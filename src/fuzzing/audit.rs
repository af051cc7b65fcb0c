//! The `audit_verify` target: an audit log → `audit verify`'s verdict. A log as found
//! gets the same verdict read whole or streamed; a sealed chain verifies, and any one
//! changed byte is caught.

use crate::audit::key::{link_hash, AuditKey};
use crate::audit::record::GENESIS;
use crate::audit::verify::{verify, verify_reader, Breach};

/// The key keyed chains are sealed with here (any 16+ bytes will do).
const AUDIT_KEY: &[u8] = b"toolgate-fuzz-audit-key-0123456789";

/// `[flags] [at hi] [at lo] [xor] text`. Flags bit 2 clear: `text` is a log as found on
/// disk, verified as is. Bit 2 set: each line of `text` becomes one record sealed into a
/// valid chain (keyed when bit 0 is set), which must verify whole, and then, changed by
/// xor-ing one byte at `at`, must not. Bit 1: verify with the key; bit 3: expect the
/// writer to have acknowledged seq `xor` (raw mode).
pub fn audit_verify(data: &[u8]) {
    let [flags, hi, lo, xor, text @ ..] = data else {
        return;
    };
    let key = match AuditKey::from_bytes(AUDIT_KEY) {
        Some(key) => key,
        None => panic!("the fuzz audit key is long enough"),
    };
    let verify_key = (flags & 2 != 0).then_some(&key);
    if flags & 4 == 0 {
        let expect = (flags & 8 != 0).then_some(u64::from(*xor));
        check_log(text, verify_key, expect);
        return;
    }
    let seal_key = (flags & 1 != 0).then_some(&key);
    let (log, records) = seal(text, seal_key);
    let intact = verify_reader(log.as_slice(), verify_key, None);
    if seal_key.is_some() == verify_key.is_some() {
        let Ok(summary) = intact else {
            panic!(
                "a sealed log does not verify: {intact:?}\n{}",
                String::from_utf8_lossy(&log)
            )
        };
        assert_eq!(summary.records, records);
        assert_eq!(summary.last_seq, records);
    } else if records > 0 {
        assert!(intact.is_err(), "a log verified with the wrong key");
    }
    let at = usize::from(u16::from_be_bytes([*hi, *lo]));
    if *xor == 0 || log.is_empty() {
        return;
    }
    let mut tampered = log;
    let at = at % tampered.len();
    tampered[at] ^= xor;
    let found = verify_reader(tampered.as_slice(), verify_key, None);
    assert!(
        found.is_err(),
        "a change at byte {at} went unnoticed: {}",
        String::from_utf8_lossy(&tampered)
    );
}

/// A log as found: whatever the verdict, it is the same read whole or streamed, it
/// counts only what precedes the break, and a log that verifies ends in a newline.
fn check_log(text: &[u8], key: Option<&AuditKey>, expect: Option<u64>) {
    let streamed = verify_reader(text, key, expect);
    if let (Ok(whole), None) = (std::str::from_utf8(text), expect) {
        assert_eq!(verify(whole, key), streamed);
    }
    let lines = text.split(|&b| b == b'\n').count();
    match streamed {
        Ok(summary) => {
            assert!(text.is_empty() || text.ends_with(b"\n"));
            assert_eq!(summary.last_seq, summary.records);
            assert!(summary.records <= lines as u64);
            let kinds = summary.calls
                + summary.starts
                + summary.policies
                + summary.approvals
                + summary.other;
            assert_eq!(kinds, summary.records);
            assert!(expect.is_none_or(|e| e <= summary.last_seq));
        }
        Err(broken) => {
            assert!(broken.line >= 1 && broken.line <= lines + 1, "{broken:?}");
            if broken.breach == Breach::Tampered {
                // Every line before the tampered one is intact on its own.
                let cut = text
                    .split_inclusive(|&b| b == b'\n')
                    .take(broken.line - 1)
                    .map(<[u8]>::len)
                    .sum();
                let before = verify_reader(&text[..cut], key, None);
                assert!(
                    before.is_ok(),
                    "{broken:?} but the lines before: {before:?}"
                );
            }
        }
    }
}

/// Seals each line of `text` into a chained record, as the writer would.
fn seal(text: &[u8], key: Option<&AuditKey>) -> (Vec<u8>, u64) {
    let mut log = Vec::new();
    let mut prev = GENESIS.to_string();
    let mut seq = 0;
    for line in String::from_utf8_lossy(text).lines() {
        seq += 1;
        let note = serde_json::to_string(line).unwrap_or_default();
        let body = format!(r#"{{"ts":"t","seq":{seq},"kind":"call","note":{note},"prev":"{prev}""#);
        let hash = link_hash(key, &prev, &body);
        log.extend_from_slice(format!("{body},\"hash\":\"{hash}\"}}\n").as_bytes());
        prev = hash;
    }
    (log, seq)
}
