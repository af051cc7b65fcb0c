//! The `sse` target: an upstream event stream, delivered in chunks, through the real
//! re-emitter (`proxy::mcp::answer`). Output is upstream bytes in order plus bounded
//! rewrites, and does not depend on how the stream was chunked.

use bytes::Bytes;
use http_body::Frame;
use http_body_util::{BodyExt, StreamBody};
use serde_json::{json, Value};
use std::convert::Infallible;

use crate::proxy::backend::sse::Parser;
use crate::proxy::backend::Failure;
use crate::proxy::mcp::answer::{self, Rewrite};

/// `Reemitted` answers: what the re-emitter puts in place of the upstream's response and
/// of a response that never came.
const ANSWERED: &str = r#"{"fuzz":"answered"}"#;
const FAILED: &str = r#"{"fuzz":"failed"}"#;

struct Reemitted;

impl Rewrite for Reemitted {
    fn answer(&mut self, _: Value) -> Value {
        json!({"fuzz": "answered"})
    }

    fn failed(&mut self, _: Failure) -> Value {
        json!({"fuzz": "failed"})
    }
}

/// `[chunking] [event limit] stream...`: the low 6 bits of the first byte are the chunk
/// size the upstream delivers in (1–64), bit 6 selects the resumed-GET mode that drops
/// responses, bit 7 an unlimited event size (then the output must not depend on the
/// chunking); the second byte sets the event limit (16–2056 bytes).
pub fn sse(data: &[u8]) {
    let [control, limit, stream @ ..] = data else {
        return;
    };
    let chunk = usize::from(control & 0x3f) + 1;
    let drop_responses = control & 0x40 != 0;
    let max_event = match control & 0x80 {
        0 => 16 + usize::from(*limit) * 8,
        _ => usize::MAX,
    };
    let frames = reemit(stream, chunk, drop_responses, max_event);
    check_reemitted(stream, &frames, drop_responses);
    if max_event == usize::MAX {
        let whole = reemit(stream, stream.len().max(1), drop_responses, max_event);
        assert_eq!(
            frames.concat(),
            whole.concat(),
            "output depends on chunking"
        );
    }
}

fn reemit(stream: &[u8], chunk: usize, drop_responses: bool, max_event: usize) -> Vec<Bytes> {
    let chunks: Vec<Result<Frame<Bytes>, Infallible>> = stream
        .chunks(chunk)
        .map(|c| Ok(Frame::data(Bytes::copy_from_slice(c))))
        .collect();
    let upstream = StreamBody::new(futures_util::stream::iter(chunks));
    let mut body = if drop_responses {
        answer::without_responses(upstream, max_event)
    } else {
        answer::rewrite_sse(upstream, json!(1), Reemitted, max_event, None)
    };
    futures_executor::block_on(async {
        let mut frames = Vec::new();
        while let Some(frame) = body.frame().await {
            match frame.map(Frame::into_data) {
                Ok(Ok(data)) => frames.push(data),
                Ok(Err(_)) => panic!("the re-emitter sent a non-data frame"),
                Err(e) => panic!("the re-emitter failed on an in-memory stream: {e}"),
            }
        }
        frames
    })
}

/// Every frame is an upstream event passed byte for byte, in order, or one rewritten
/// response (at most one failure, last); so the output is bounded by the input plus a
/// constant per rewritten event (values of `event`, `id` and `retry` lines may grow up
/// to 3× where invalid UTF-8 becomes U+FFFD).
fn check_reemitted(stream: &[u8], frames: &[Bytes], drop_responses: bool) {
    let mut cursor = 0;
    let mut rewritten = 0;
    for (i, frame) in frames.iter().enumerate() {
        // Rewrites first: the stream may hold a rewrite's very bytes further on, and
        // matching there would skip the events before it. An upstream event that looks
        // like a rewrite and is counted as one only loosens the bound below.
        let last = i + 1 == frames.len();
        match rewrite_of(frame).filter(|_| !drop_responses) {
            Some(ANSWERED) => {
                rewritten += 1;
                continue;
            }
            // A failure answer can only end the stream.
            Some(_) if last => {
                rewritten += 1;
                continue;
            }
            _ => {}
        }
        let Some(at) = find(&stream[cursor..], frame) else {
            panic!("frame {i} is neither upstream bytes, in order, nor a rewrite: {frames:?}")
        };
        cursor += at + frame.len();
    }
    let out: usize = frames.iter().map(Bytes::len).sum();
    let framing = 32 + ANSWERED.len().max(FAILED.len());
    assert!(out <= 3 * stream.len() + (rewritten + 1) * framing);
}

/// The rewrite a frame carries: exactly one event whose data is one of ours.
fn rewrite_of(frame: &Bytes) -> Option<&'static str> {
    let mut parser = Parser::new(usize::MAX);
    parser.push(frame);
    let event = parser.next_event(true).filter(|e| e.raw == *frame)?;
    [ANSWERED, FAILED].into_iter().find(|&r| event.data == r)
}

/// Where `needle` first occurs in `haystack`; an empty needle never counts as found.
fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    if needle.is_empty() || needle.len() > haystack.len() {
        return None;
    }
    haystack.windows(needle.len()).position(|w| w == needle)
}
