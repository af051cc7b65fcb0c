//! Whether a JSON answer that streams through unread is a tool's own error
//! (`result.isError: true`) or the server's JSON-RPC `error`, found as its bytes pass.
//!
//! A tools/call answered with one JSON body and a contract that shapes nothing is passed
//! to the agent as it arrives, never buffered (it may be large). Its span must still say
//! when the tool failed (`error.type = tool_error`, DESIGN §13/§14), so the bytes go
//! through [`Scan`], a small JSON state machine that follows only what it needs: the
//! keys of the top-level object and of its `result` object, and the literal that follows
//! `isError`. It keeps a few bytes of state whatever the body's size, never allocates
//! after its first key, and gives up (answers "no") on anything that isn't a JSON object.

/// The scanner; feed it every chunk in order.
#[derive(Debug, Default)]
pub struct Scan {
    /// Containers open around the current byte.
    depth: u32,
    /// Whether each of the first two levels is an object (keys) rather than an array.
    objects: [bool; 2],
    in_string: bool,
    escaped: bool,
    /// The string being read is a key at level 1 or 2.
    in_key: bool,
    /// The key just read (its first bytes; longer keys are no key we look for).
    key: [u8; KEY],
    key_len: usize,
    /// Between a key and its value, after the `:`.
    after_colon: bool,
    /// The level-2 object open now is the top-level object's `result`.
    in_result: bool,
    /// The value being read is `result.isError`'s: the bytes of its literal so far.
    literal: Option<[u8; 5]>,
    literal_len: usize,
    found: bool,
    /// The top-level object has an `error` object: a JSON-RPC error, not a result.
    rpc_error: bool,
    /// The top-level object's `result` object opened.
    result_seen: bool,
    /// The top-level value closed: the answer is whole.
    closed: bool,
}

/// The longest key compared (`isError`, `result`).
const KEY: usize = 8;

impl Scan {
    pub fn feed(&mut self, bytes: &[u8]) {
        if self.done() {
            return;
        }
        for &b in bytes {
            self.byte(b);
            if self.done() {
                return;
            }
        }
    }

    /// Whether the answer so far said `result.isError: true`.
    pub fn found(&self) -> bool {
        self.found
    }

    /// Whether the answer is a JSON-RPC error (its top-level `error` object opened).
    pub fn rpc_error(&self) -> bool {
        self.rpc_error
    }

    /// Whether the answer is a whole JSON object with a `result` object that is not the
    /// tool's error: what `requires` may count as a successful call. An answer cut
    /// short, garbage, or one without a result is not.
    pub fn succeeded(&self) -> bool {
        self.result_seen && self.closed && !self.found && !self.rpc_error
    }

    /// Whether the answer has said how the call went: nothing later changes it.
    pub fn done(&self) -> bool {
        self.found || self.rpc_error
    }

    fn byte(&mut self, b: u8) {
        if self.in_string {
            return self.string_byte(b);
        }
        if let Some(mut literal) = self.literal {
            if b.is_ascii_alphabetic() && self.literal_len < literal.len() {
                literal[self.literal_len] = b;
                self.literal_len += 1;
                self.literal = Some(literal);
                return;
            }
            self.found = &literal[..self.literal_len] == b"true";
            self.literal = None;
            if self.found {
                return;
            }
        }
        match b {
            b'"' => {
                self.in_string = true;
                self.in_key = self.expects_key();
                self.key_len = 0;
            }
            b'{' | b'[' => {
                let is_object = b == b'{';
                let entering_result = self.depth == 1 && self.after_colon && self.key_is(b"result");
                self.rpc_error |=
                    self.depth == 1 && self.after_colon && is_object && self.key_is(b"error");
                self.depth += 1;
                if let Some(level) = self.objects.get_mut(self.depth as usize - 1) {
                    *level = is_object;
                }
                if self.depth == 2 {
                    self.in_result = entering_result && is_object;
                    self.result_seen |= self.in_result;
                }
                self.after_colon = false;
            }
            b'}' | b']' => {
                self.closed |= self.depth == 1 && self.objects[0];
                self.depth = self.depth.saturating_sub(1);
                if self.depth < 2 {
                    self.in_result = false;
                }
                self.after_colon = false;
            }
            b':' => self.after_colon = true,
            b',' => self.after_colon = false,
            _ if b.is_ascii_whitespace() => {}
            _ => {
                // A literal or number value starts.
                if self.depth == 2 && self.in_result && self.after_colon && self.key_is(b"isError")
                {
                    let mut literal = [0u8; 5];
                    literal[0] = b;
                    self.literal = Some(literal);
                    self.literal_len = 1;
                }
                self.after_colon = false;
            }
        }
    }

    fn string_byte(&mut self, b: u8) {
        if self.escaped {
            self.escaped = false;
            // An escaped key never matches: ours are plain ASCII.
            self.key_len = KEY + 1;
        } else if b == b'\\' {
            self.escaped = true;
        } else if b == b'"' {
            self.in_string = false;
            if !self.in_key {
                // A string value: whatever key it belonged to is done.
                self.after_colon = false;
            }
            self.in_key = false;
        } else if self.in_key {
            if self.key_len < KEY {
                self.key[self.key_len] = b;
            }
            self.key_len += 1;
        }
    }

    /// A string here is a key: in an object of level 1 or 2, where no value is pending.
    fn expects_key(&self) -> bool {
        (self.depth == 1 || self.depth == 2)
            && self.objects[self.depth as usize - 1]
            && !self.after_colon
    }

    fn key_is(&self, name: &[u8]) -> bool {
        self.key_len == name.len() && &self.key[..self.key_len] == name
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The scan of `text` whole, checked against the same text cut anywhere (byte by
    /// byte included): the same answer.
    fn scanned(text: &str) -> Scan {
        let mut whole = Scan::default();
        whole.feed(text.as_bytes());
        for cut in 0..text.len() {
            let mut split = Scan::default();
            split.feed(&text.as_bytes()[..cut]);
            split.feed(&text.as_bytes()[cut..]);
            assert_eq!(split.found(), whole.found(), "cut at {cut}: {text}");
            assert_eq!(split.rpc_error(), whole.rpc_error(), "cut at {cut}: {text}");
        }
        whole
    }

    fn scan(text: &str) -> bool {
        scanned(text).found()
    }

    #[test]
    fn a_tool_error_is_found_wherever_it_stands() {
        for text in [
            r#"{"jsonrpc":"2.0","id":1,"result":{"isError":true,"content":[]}}"#,
            r#"{"result": {"content": [{"type":"text","text":"isError"}], "isError" : true }, "id": 1}"#,
            r#"{"id":"x","result":{"structuredContent":{"isError":false,"a":[1,{"b":"}"}]},"isError":true}}"#,
            "{\n  \"result\": {\n    \"isError\": true\n  }\n}",
        ] {
            assert!(scan(text), "{text}");
        }
    }

    #[test]
    fn anything_else_is_not_one() {
        for text in [
            r#"{"jsonrpc":"2.0","id":1,"result":{"isError":false,"content":[]}}"#,
            r#"{"result":{"content":[{"isError":true}]}}"#,
            r#"{"result":{"structuredContent":{"isError":true}}}"#,
            r#"{"error":{"code":-32602,"isError":true}}"#,
            r#"{"isError":true}"#,
            r#"{"result":{"text":"\"isError\":true"}}"#,
            r#"{"result":{"is\u0045rror":true}}"#,
            r#"{"result":{"isError":"true"}}"#,
            r#"{"result":{"isError":truex}}"#,
            r#"[{"result":{"isError":true}}]"#,
            r#"{"result":[{"isError":true}]}"#,
            "not json at all",
            "",
        ] {
            assert!(!scan(text), "{text}");
        }
    }

    #[test]
    fn a_json_rpc_error_is_told_apart_wherever_the_answer_is_cut() {
        let rpc = |text: &str| {
            let scan = scanned(text);
            scan.rpc_error() && !scan.found()
        };
        assert!(rpc(
            r#"{"jsonrpc":"2.0","id":1,"error":{"code":-32602,"message":"x"}}"#
        ));
        assert!(rpc(r#"{ "error" : {"code": 1}, "id": "a"}"#));
        for text in [
            r#"{"jsonrpc":"2.0","id":1,"result":{"content":[],"error":{"a":1}}}"#,
            r#"{"result":{"structuredContent":{"error":{"code":1}}}}"#,
            r#"{"result":{"text":"\"error\":{}"}}"#,
            r#"{"error":"not an object"}"#,
        ] {
            assert!(!rpc(text), "{text}");
        }
    }

    #[test]
    fn only_a_whole_answer_with_a_result_succeeds() {
        let scan = |text: &str| {
            let mut scan = Scan::default();
            scan.feed(text.as_bytes());
            scan.succeeded()
        };
        assert!(scan(r#"{"jsonrpc":"2.0","id":1,"result":{"content":[]}}"#));
        for text in [
            r#"{"jsonrpc":"2.0","id":1,"result":{"content":["#,
            r#"{"jsonrpc":"2.0","id":1,"result":{"content":[],"isError":true}}"#,
            r#"{"jsonrpc":"2.0","id":1,"error":{"code":1,"message":"x"}}"#,
            r#"{"jsonrpc":"2.0","id":1,"result":5}"#,
            r#"{"jsonrpc":"2.0","id":1}"#,
            "garbage",
            "",
        ] {
            assert!(!scan(text), "{text}");
        }
    }
}
