//! Request framing as the bytes arrive, to refuse what hyper would quietly repair.
//!
//! A request carrying both `Content-Length` and `Transfer-Encoding` is the classic
//! smuggling shape: two parsers may disagree on where it ends. hyper prefers the chunked
//! encoding, drops `Content-Length` from the request it hands over and closes the
//! connection afterwards, so the handler can no longer tell such a request from a plain
//! chunked one. Envoy refuses it outright (400), and so does toolgate: this module
//! watches the bytes a connection reads, follows HTTP/1.1 message boundaries (heads,
//! `Content-Length` and chunked bodies), and records the index of the first request
//! whose head names both headers — or names one of them in a line too long to read —
//! so the server can mark that request and every later one on the connection.
//!
//! It only watches: bytes pass unchanged and hyper stays the parser. It keeps one header
//! line (bounded) per connection, and stops following a connection that turns out to
//! be HTTP/2 or whose framing hyper itself will refuse (hyper closes those).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// Longest header line kept; a framing header longer than this is refused, not guessed.
const MAX_LINE: usize = 8 * 1024;

/// The request extension that marks a request with ambiguous framing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AmbiguousFraming;

/// What a connection's watcher and its request handler share: how many requests were
/// served, and which was the first with ambiguous framing. Both run in the connection's
/// task, so relaxed ordering is enough.
#[derive(Debug)]
pub struct Tally {
    /// Index of the first request (0-based, in arrival order) with ambiguous framing.
    first: AtomicU64,
    /// Requests handed to the service so far.
    served: AtomicU64,
}

impl Default for Tally {
    fn default() -> Self {
        Tally {
            first: AtomicU64::new(u64::MAX),
            served: AtomicU64::new(0),
        }
    }
}

impl Tally {
    /// Called once per request, in order: whether this one is at or past the first
    /// ambiguous head. hyper serves an HTTP/1.1 connection's requests one after another,
    /// and a head is complete (so recorded) before hyper can hand its request over.
    pub fn next_is_ambiguous(&self) -> bool {
        let index = self.served.fetch_add(1, Ordering::Relaxed);
        index >= self.first.load(Ordering::Relaxed)
    }

    /// Requests handed to the service so far.
    pub fn served(&self) -> u64 {
        self.served.load(Ordering::Relaxed)
    }

    /// Whether a request with ambiguous framing arrived on this connection.
    pub fn saw_ambiguous(&self) -> bool {
        self.first.load(Ordering::Relaxed) != u64::MAX
    }

    fn record(&self, head: u64) {
        self.first.fetch_min(head, Ordering::Relaxed);
    }
}

/// Where in the byte stream the tracker is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// Between messages: blank lines are skipped, as hyper's parser does.
    Between,
    /// Reading a head, line by line.
    Head,
    /// A `Content-Length` body with this many bytes left.
    Sized(u64),
    /// A chunk-size line, its value so far and whether it has a digit.
    ChunkSize(u64, bool),
    /// The rest of a chunk-size line (extensions) after the size.
    ChunkExt(u64),
    /// Chunk data with this many bytes left.
    ChunkData(u64),
    /// The line end after chunk data.
    ChunkEnd,
    /// Trailer lines after the last chunk; whether the current line is still empty.
    Trailer(bool),
    /// Not followed any further (HTTP/2, or framing hyper refuses and closes on).
    Off,
}

/// What the head being read has said about framing.
#[derive(Debug, Default)]
struct Head {
    request_line_done: bool,
    content_length: Option<u64>,
    /// A `Content-Length` hyper refuses (not a number, or two that differ).
    bad_length: bool,
    transfer_encoding: bool,
    chunked: bool,
    /// A framing header too long to read whole.
    overlong: bool,
}

pub struct Tracker {
    state: State,
    head: Head,
    line: Vec<u8>,
    line_overlong: bool,
    /// Heads completed so far on this connection.
    heads: u64,
    /// The connection turned out to be HTTP/2: there are no heads to follow.
    http2: bool,
    /// The client closed its side: it sends nothing more.
    ended: bool,
    tally: Arc<Tally>,
}

impl Tracker {
    pub fn new(tally: Arc<Tally>) -> Tracker {
        Tracker {
            state: State::Between,
            head: Head::default(),
            line: Vec::new(),
            line_overlong: false,
            heads: 0,
            http2: false,
            ended: false,
            tally,
        }
    }

    /// The client closed its sending side.
    pub fn end(&mut self) {
        self.ended = true;
    }

    /// Whether the client may still be sending a request the server has not read whole:
    /// an HTTP/1 connection, not closed by the client, in the middle of a message (or
    /// past framing it could no longer follow). Closing it now would reset the client
    /// while it writes; it needs a lingering close.
    pub fn unfinished(&self) -> bool {
        !self.http2 && !self.ended && self.state != State::Between
    }

    /// Follows the next bytes read from the connection.
    pub fn feed(&mut self, mut bytes: &[u8]) {
        while !bytes.is_empty() {
            let used = match self.state {
                State::Off => return,
                State::Sized(left) => {
                    let used = left.min(bytes.len() as u64);
                    self.state = match left - used {
                        0 => State::Between,
                        left => State::Sized(left),
                    };
                    used as usize
                }
                State::ChunkData(left) => {
                    let used = left.min(bytes.len() as u64);
                    self.state = match left - used {
                        0 => State::ChunkEnd,
                        left => State::ChunkData(left),
                    };
                    used as usize
                }
                State::Head => self.head_bytes(bytes),
                _ => {
                    self.byte(bytes[0]);
                    1
                }
            };
            bytes = &bytes[used..];
        }
    }

    /// Takes head bytes up to and including the next line end; returns how many.
    fn head_bytes(&mut self, bytes: &[u8]) -> usize {
        let end = memchr::memchr(b'\n', bytes);
        let (part, used) = match end {
            Some(end) => (&bytes[..end], end + 1),
            None => (bytes, bytes.len()),
        };
        let room = MAX_LINE.saturating_sub(self.line.len());
        if end.is_some() && self.line.is_empty() {
            // The whole line came in this read, as nearly every header line does: it is
            // judged where it lies instead of copied (this runs on every request).
            self.line_ended(&part[..part.len().min(room)], part.len() > room);
            return used;
        }
        self.line.extend_from_slice(&part[..part.len().min(room)]);
        self.line_overlong |= part.len() > room;
        if end.is_some() {
            let line = std::mem::take(&mut self.line);
            let overlong = std::mem::take(&mut self.line_overlong);
            self.line_ended(&line, overlong);
            // The buffer is kept for the next line split across reads.
            self.line = line;
            self.line.clear();
        }
        used
    }

    /// One byte outside heads and data.
    fn byte(&mut self, b: u8) {
        self.state = match (self.state, b) {
            (State::Between, b'\r' | b'\n') => State::Between,
            (State::Between, b) => {
                self.line.push(b);
                State::Head
            }
            (State::ChunkSize(size, _), b'0'..=b'9' | b'a'..=b'f' | b'A'..=b'F') => {
                let digit = (b as char).to_digit(16).map_or(0, u64::from);
                match size.checked_mul(16).and_then(|s| s.checked_add(digit)) {
                    Some(size) => State::ChunkSize(size, true),
                    None => State::Off,
                }
            }
            (State::ChunkSize(size, true), b';' | b' ' | b'\t') => State::ChunkExt(size),
            (State::ChunkSize(size, true), b'\r') => State::ChunkExt(size),
            (State::ChunkSize(size, true) | State::ChunkExt(size), b'\n') => match size {
                0 => State::Trailer(true),
                size => State::ChunkData(size),
            },
            (State::ChunkExt(size), _) => State::ChunkExt(size),
            (State::ChunkEnd, b'\r') => State::ChunkEnd,
            (State::ChunkEnd, b'\n') => State::ChunkSize(0, false),
            (State::Trailer(empty), b'\r') => State::Trailer(empty),
            (State::Trailer(true), b'\n') => State::Between,
            (State::Trailer(false), b'\n') => State::Trailer(true),
            (State::Trailer(_), _) => State::Trailer(false),
            // Anything else is framing hyper refuses, closing the connection.
            _ => State::Off,
        };
    }

    /// A complete head line is in `line` (without its LF).
    /// A head line without its `\n` (at most `MAX_LINE` bytes of it; `overlong` when
    /// there were more).
    fn line_ended(&mut self, line: &[u8], overlong: bool) {
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        if !self.head.request_line_done {
            self.head.request_line_done = true;
            // The HTTP/2 preface: hyper switches protocols; there are no more heads.
            if line.starts_with(b"PRI * HTTP/2.0") {
                self.http2 = true;
                self.state = State::Off;
            }
        } else if line.is_empty() {
            self.end_of_head();
        } else {
            self.header(line, overlong);
        }
    }

    fn header(&mut self, line: &[u8], overlong: bool) {
        let Some(colon) = line.iter().position(|&b| b == b':') else {
            return;
        };
        let name = &line[..colon];
        let value = line[colon + 1..].trim_ascii();
        if name.eq_ignore_ascii_case(b"content-length") {
            self.head.overlong |= overlong;
            let parsed = std::str::from_utf8(value)
                .ok()
                .filter(|v| !v.is_empty() && v.bytes().all(|b| b.is_ascii_digit()))
                .and_then(|v| v.parse::<u64>().ok());
            match (parsed, self.head.content_length) {
                (Some(n), None) => self.head.content_length = Some(n),
                (Some(n), Some(previous)) if n == previous => {}
                _ => self.head.bad_length = true,
            }
        } else if name.eq_ignore_ascii_case(b"transfer-encoding") {
            self.head.overlong |= overlong;
            self.head.transfer_encoding = true;
            // hyper reads the last coding of the last Transfer-Encoding line.
            let last = value.rsplit(|&b| b == b',').next().unwrap_or_default();
            self.head.chunked = last.trim_ascii().eq_ignore_ascii_case(b"chunked");
        }
    }

    fn end_of_head(&mut self) {
        let head = std::mem::take(&mut self.head);
        let index = self.heads;
        self.heads += 1;
        let has_length = head.content_length.is_some() || head.bad_length;
        self.state = if head.overlong || (head.transfer_encoding && has_length) {
            // The connection closes after this request's answer (the server says
            // `Connection: close`); nothing that follows it is served.
            self.tally.record(index);
            State::Off
        } else if head.transfer_encoding && head.chunked {
            State::ChunkSize(0, false)
        } else if head.transfer_encoding || head.bad_length {
            State::Off
        } else {
            match head.content_length {
                Some(0) | None => State::Between,
                Some(n) => State::Sized(n),
            }
        };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Feeds `input` in pieces of `step` bytes; the first ambiguous request's index.
    fn first_conflict(input: &[u8], step: usize) -> Option<u64> {
        let tally = Arc::new(Tally::default());
        let mut tracker = Tracker::new(tally.clone());
        input.chunks(step).for_each(|c| tracker.feed(c));
        Some(tally.first.load(Ordering::Relaxed)).filter(|&i| i != u64::MAX)
    }

    fn every_step(input: &[u8]) -> Option<u64> {
        let found = first_conflict(input, input.len().max(1));
        for step in [1, 2, 3, 7] {
            assert_eq!(first_conflict(input, step), found, "step {step}");
        }
        found
    }

    #[test]
    fn both_framing_headers_are_found_in_either_order() {
        let cl_te =
            b"POST /a HTTP/1.1\r\nContent-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n";
        assert_eq!(every_step(cl_te), Some(0));
        let te_cl =
            b"POST /a HTTP/1.1\r\ntransfer-encoding: chunked\r\ncontent-length: 4\r\n\r\n0\r\n\r\n";
        assert_eq!(every_step(te_cl), Some(0));
    }

    #[test]
    fn later_requests_are_found_past_every_kind_of_body() {
        let mut input = Vec::new();
        input.extend_from_slice(b"\r\nGET /a HTTP/1.1\r\nHost: x\r\n\r\n");
        input.extend_from_slice(b"POST /b HTTP/1.1\r\nContent-Length: 4\r\n\r\nabcd");
        input.extend_from_slice(b"GET /c HTTP/1.1\r\nContent-Length: 5\r\n\r\n1234\n");
        input.extend_from_slice(
            b"POST /d HTTP/1.1\nTransfer-Encoding: gzip, chunked\n\n5;x=y\r\nab\r\nc\r\n0\r\nT: 1\r\n\r\n",
        );
        input.extend_from_slice(b"POST /e HTTP/1.1\r\nContent-Length: 0\r\n\r\n");
        assert_eq!(every_step(&input), None);
        input.extend_from_slice(
            b"POST /f HTTP/1.1\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n",
        );
        assert_eq!(every_step(&input), Some(5));
    }

    #[test]
    fn body_bytes_that_look_like_headers_are_not_read_as_heads() {
        let body = b"x\r\nContent-Length: 1\r\nTransfer-Encoding: chunked\r\n\r\n";
        let mut input =
            format!("POST /a HTTP/1.1\r\nContent-Length: {}\r\n\r\n", body.len()).into_bytes();
        input.extend_from_slice(body);
        input.extend_from_slice(b"GET /b HTTP/1.1\r\n\r\n");
        assert_eq!(every_step(&input), None);
    }

    #[test]
    fn an_overlong_framing_header_counts_as_ambiguous() {
        let zeros = "0".repeat(MAX_LINE + 10);
        let input = format!("POST /a HTTP/1.1\r\nContent-Length: {zeros}4\r\n\r\nbody");
        assert_eq!(every_step(input.as_bytes()), Some(0));
        let long = format!("GET /a HTTP/1.1\r\nX-Long: {zeros}\r\n\r\n");
        assert_eq!(every_step(long.as_bytes()), None);
    }

    #[test]
    fn http2_and_refused_framing_stop_the_watch() {
        let preface = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\nContent-Length: 1\r\nTransfer-Encoding: chunked\r\n\r\n";
        assert_eq!(every_step(preface), None);
        let gzip = b"POST /a HTTP/1.1\r\nTransfer-Encoding: gzip\r\n\r\nPOST /b HTTP/1.1\r\nContent-Length: 1\r\nTransfer-Encoding: chunked\r\n\r\n";
        assert_eq!(every_step(gzip), None);
    }

    #[test]
    fn a_message_cut_short_is_unfinished_until_the_client_ends() {
        let mut tracker = Tracker::new(Arc::new(Tally::default()));
        assert!(!tracker.unfinished());
        tracker.feed(b"POST /a HTTP/1.1\r\nContent-Length: 10\r\n\r\n1234");
        assert!(tracker.unfinished(), "six body bytes are still to come");
        tracker.feed(b"567890");
        assert!(!tracker.unfinished());
        tracker.feed(b"GET /b HTT");
        assert!(tracker.unfinished());
        tracker.end();
        assert!(
            !tracker.unfinished(),
            "a client that closed sends nothing more"
        );
        let mut h2 = Tracker::new(Arc::new(Tally::default()));
        h2.feed(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n");
        assert!(!h2.unfinished());
    }

    #[test]
    fn requests_are_marked_from_the_first_conflict_on() {
        let tally = Tally::default();
        tally.record(1);
        let marks: Vec<bool> = (0..3).map(|_| tally.next_is_ambiguous()).collect();
        assert_eq!(marks, [false, true, true]);
    }
}
