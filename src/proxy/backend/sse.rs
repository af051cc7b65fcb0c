//! A bounded, incremental Server-Sent Events parser.
//!
//! Bytes go in as they arrive; complete events come out with their exact raw bytes, so
//! an event toolgate doesn't rewrite is re-emitted byte for byte. Lines may end in LF,
//! CRLF or CR (a CR at the end of a chunk waits for the next one, which may hold its LF).
//! Only the event being assembled is buffered, and never more than `max` bytes of it.

use bytes::{Bytes, BytesMut};

/// One complete event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Event {
    /// The event's bytes as received, blank line included.
    pub raw: Bytes,
    pub event: Option<String>,
    pub id: Option<String>,
    pub retry: Option<String>,
    /// The `data` lines joined with `\n`.
    pub data: String,
}

impl Event {
    /// Whether it is a `message` event (the type MCP uses), named or by default.
    pub fn is_message(&self) -> bool {
        self.event.as_deref().is_none_or(|e| e == "message")
    }

    /// The same event with new data (one line of JSON), other fields kept.
    pub fn with_data(&self, data: &str) -> Bytes {
        let mut out = String::with_capacity(data.len() + 64);
        if let Some(event) = &self.event {
            out.push_str(&format!("event: {event}\n"));
        }
        if let Some(id) = &self.id {
            out.push_str(&format!("id: {id}\n"));
        }
        if let Some(retry) = &self.retry {
            out.push_str(&format!("retry: {retry}\n"));
        }
        for line in data.split('\n') {
            out.push_str(&format!("data: {line}\n"));
        }
        out.push('\n');
        Bytes::from(out)
    }
}

/// The event being assembled passed the limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("an event is larger than {0} bytes")]
pub struct TooLarge(pub usize);

pub struct Parser {
    buf: BytesMut,
    /// Bytes of `buf` already split into lines (all belonging to the current event).
    scanned: usize,
    /// Bytes after `scanned` already searched for a line end without finding one: a
    /// long line arriving in many chunks is searched once, not once per chunk (which
    /// made a backend's 8 MiB line cost gigabytes of scanning).
    searched: usize,
    event: Option<String>,
    id: Option<String>,
    retry: Option<String>,
    data: Option<String>,
    max: usize,
}

impl Parser {
    pub fn new(max: usize) -> Parser {
        Parser {
            buf: BytesMut::new(),
            scanned: 0,
            searched: 0,
            event: None,
            id: None,
            retry: None,
            data: None,
            max,
        }
    }

    /// Appends a chunk. Call [`Parser::next_event`] until it returns `None`, then
    /// [`Parser::check`].
    pub fn push(&mut self, chunk: &[u8]) {
        self.buf.extend_from_slice(chunk);
    }

    /// Fails when the unfinished event is over the limit.
    pub fn check(&self) -> Result<(), TooLarge> {
        if self.buf.len() > self.max {
            return Err(TooLarge(self.max));
        }
        Ok(())
    }

    /// The next complete event; at `eof` an unterminated trailing event is dropped, as
    /// the SSE specification says.
    pub fn next_event(&mut self, eof: bool) -> Option<Event> {
        loop {
            let rest = &self.buf[self.scanned..];
            let Some(found) = rest[self.searched..]
                .iter()
                .position(|&b| b == b'\n' || b == b'\r')
            else {
                self.searched = rest.len();
                return None;
            };
            let end = self.searched + found;
            let terminator = match (rest[end], rest.get(end + 1)) {
                (b'\r', Some(b'\n')) => 2,
                // A CR at the end of what arrived may be the first half of a CRLF.
                (b'\r', None) if !eof => {
                    self.searched = end;
                    return None;
                }
                _ => 1,
            };
            self.searched = 0;
            let line = String::from_utf8_lossy(&rest[..end]).into_owned();
            self.scanned += end + terminator;
            if line.is_empty() {
                let raw = self.buf.split_to(self.scanned).freeze();
                self.scanned = 0;
                let data = self.data.take();
                let event = Event {
                    raw,
                    event: self.event.take(),
                    id: self.id.take(),
                    retry: self.retry.take(),
                    data: data.unwrap_or_default(),
                };
                return Some(event);
            }
            self.field(&line);
        }
    }

    fn field(&mut self, line: &str) {
        if line.starts_with(':') {
            return; // a comment
        }
        let (name, value) = match line.split_once(':') {
            Some((name, value)) => (name, value.strip_prefix(' ').unwrap_or(value)),
            None => (line, ""),
        };
        match name {
            "event" => self.event = Some(value.to_string()),
            "id" => self.id = Some(value.to_string()),
            "retry" => self.retry = Some(value.to_string()),
            "data" => match &mut self.data {
                Some(data) => {
                    data.push('\n');
                    data.push_str(value);
                }
                None => self.data = Some(value.to_string()),
            },
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn all(parser: &mut Parser, eof: bool) -> Vec<Event> {
        std::iter::from_fn(|| parser.next_event(eof)).collect()
    }

    #[test]
    fn parses_python_and_typescript_framing() {
        let mut p = Parser::new(1024);
        p.push(b"event: message\r\ndata: {\"a\":1}\r\n\r\nid: p1\ndata: \n\nevent: message\nid: e2\ndata: {\"b\":");
        let events = all(&mut p, false);
        assert_eq!(events.len(), 2);
        assert_eq!(events[0].data, "{\"a\":1}");
        assert!(events[0].is_message());
        assert_eq!(
            events[0].raw.as_ref(),
            b"event: message\r\ndata: {\"a\":1}\r\n\r\n"
        );
        assert_eq!(
            (events[1].id.as_deref(), events[1].data.as_str()),
            (Some("p1"), "")
        );
        p.push(b"2}\n\n");
        let events = all(&mut p, false);
        assert_eq!(events[0].data, "{\"b\":2}");
        assert_eq!(events[0].id.as_deref(), Some("e2"));
    }

    #[test]
    fn crlf_split_across_chunks_is_one_line_end() {
        let mut p = Parser::new(1024);
        p.push(b"data: x\r");
        assert!(all(&mut p, false).is_empty());
        p.push(b"\n\r");
        assert!(all(&mut p, false).is_empty());
        p.push(b"\n");
        let events = all(&mut p, false);
        assert_eq!(events.len(), 1);
        assert_eq!(events[0].raw.as_ref(), b"data: x\r\n\r\n");
    }

    #[test]
    fn multi_line_data_comments_and_rewrites() {
        let mut p = Parser::new(1024);
        p.push(b": keepalive\nevent: message\nid: 7\ndata: a\ndata: b\n\n");
        let e = p.next_event(false).unwrap();
        assert_eq!(e.data, "a\nb");
        assert_eq!(
            e.with_data("{}").as_ref(),
            b"event: message\nid: 7\ndata: {}\n\n"
        );
        let mut p = Parser::new(1024);
        p.push(b"event: endpoint\ndata: /x\n\n");
        assert!(!p.next_event(false).unwrap().is_message());
    }

    #[test]
    fn a_long_line_in_many_chunks_is_one_line() {
        let mut p = Parser::new(1 << 20);
        p.push(b"data: ");
        for _ in 0..1000 {
            p.push(b"abcdefgh");
            assert!(p.next_event(false).is_none());
        }
        p.push(b"\r");
        assert!(p.next_event(false).is_none());
        p.push(b"\n\n");
        let e = p.next_event(false).unwrap();
        assert_eq!(e.data.len(), 8000);
        assert_eq!(e.raw.len(), 6 + 8000 + 3);
    }

    #[test]
    fn the_unfinished_event_is_bounded() {
        let mut p = Parser::new(16);
        p.push(b"data: 0123456789\n\n");
        assert!(p.next_event(false).is_some());
        assert!(p.check().is_ok());
        p.push(b"data: 0123456789abcdef");
        assert!(p.next_event(false).is_none());
        assert_eq!(p.check(), Err(TooLarge(16)));
    }
}
