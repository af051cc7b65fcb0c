//! The process's own log lines, on stderr: `TOOLGATE_LOG` filters them (the `RUST_LOG`
//! syntax; each command has its default level) and `TOOLGATE_LOG_FORMAT` shapes them.
//!
//! - `text` (the default): one line per event for people, coloured only when stderr is a
//!   terminal and `NO_COLOR` is unset, so a log file or a collector never gets escape
//!   codes;
//! - `json`: one JSON object per line for log pipelines, `ts` (RFC 3339, UTC), `level`,
//!   `message`, then every field of the event under its own key (`error`, `signal`,
//!   `version` …), as its number, boolean or text.
//!
//! An unknown format is an error at start, like a bad settings value: a typo must not
//! silently change what a log pipeline receives.

use serde_json::{Map, Value};
use std::fmt;
use std::io::IsTerminal;
use tracing::field::{Field, Visit};
use tracing::{Event, Subscriber};
use tracing_subscriber::fmt::format::Writer;
use tracing_subscriber::fmt::{FmtContext, FormatEvent, FormatFields};
use tracing_subscriber::registry::LookupSpan;
use tracing_subscriber::EnvFilter;

/// How log lines are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogFormat {
    Text,
    Json,
}

/// `TOOLGATE_LOG_FORMAT` names no format.
#[derive(Debug, thiserror::Error)]
#[error("TOOLGATE_LOG_FORMAT: {0:?} is not a log format; use text (the default) or json")]
pub struct UnknownLogFormat(String);

impl LogFormat {
    /// The format `TOOLGATE_LOG_FORMAT` names (unset or empty: `text`).
    pub fn parse(value: Option<&str>) -> Result<LogFormat, UnknownLogFormat> {
        match value.map(str::trim).unwrap_or("") {
            "" | "text" => Ok(LogFormat::Text),
            "json" => Ok(LogFormat::Json),
            other => Err(UnknownLogFormat(other.to_string())),
        }
    }
}

/// Installs the process's logger: `default` is the filter when `TOOLGATE_LOG` is unset.
pub fn init(default: &str) -> Result<(), UnknownLogFormat> {
    let format = LogFormat::parse(std::env::var("TOOLGATE_LOG_FORMAT").ok().as_deref())?;
    let filter =
        EnvFilter::try_from_env("TOOLGATE_LOG").unwrap_or_else(|_| EnvFilter::new(default));
    let colour = std::io::stderr().is_terminal() && std::env::var_os("NO_COLOR").is_none();
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    // A second logger (a test that calls this twice) keeps the first.
    let _ = match format {
        LogFormat::Text => builder.with_target(false).with_ansi(colour).try_init(),
        LogFormat::Json => builder.event_format(JsonLines).try_init(),
    };
    Ok(())
}

/// A subscriber writing `format` lines to `writer`, for tests.
#[cfg(test)]
fn subscriber<W>(format: LogFormat, writer: W) -> Box<dyn Subscriber + Send + Sync>
where
    W: for<'w> tracing_subscriber::fmt::MakeWriter<'w> + Send + Sync + 'static,
{
    let builder = tracing_subscriber::fmt()
        .with_writer(writer)
        .with_max_level(tracing::Level::DEBUG);
    match format {
        LogFormat::Text => Box::new(builder.with_target(false).with_ansi(false).finish()),
        LogFormat::Json => Box::new(builder.event_format(JsonLines).finish()),
    }
}

/// One JSON object per event (see the module doc).
#[derive(Debug, Clone, Copy, Default)]
pub struct JsonLines;

impl<S, N> FormatEvent<S, N> for JsonLines
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
{
    fn format_event(
        &self,
        _ctx: &FmtContext<'_, S, N>,
        mut writer: Writer<'_>,
        event: &Event<'_>,
    ) -> fmt::Result {
        let mut fields = Fields::default();
        event.record(&mut fields);
        let mut line = Map::new();
        line.insert(
            "ts".into(),
            humantime::format_rfc3339_micros(std::time::SystemTime::now())
                .to_string()
                .into(),
        );
        line.insert(
            "level".into(),
            event
                .metadata()
                .level()
                .as_str()
                .to_ascii_lowercase()
                .into(),
        );
        line.insert(
            "message".into(),
            fields.message.take().unwrap_or_default().into(),
        );
        for (key, value) in fields.others {
            // A field named like one of the three above is kept, beside them.
            let key = match line.contains_key(&key) {
                true => format!("field.{key}"),
                false => key,
            };
            line.insert(key, value);
        }
        let text = serde_json::to_string(&Value::Object(line)).map_err(|_| fmt::Error)?;
        writeln!(writer, "{text}")
    }
}

/// An event's fields: its message apart, the others in the order they were given.
#[derive(Default)]
struct Fields {
    message: Option<String>,
    others: Vec<(String, Value)>,
}

impl Fields {
    fn put(&mut self, field: &Field, value: Value) {
        match (field.name(), value) {
            ("message", Value::String(text)) => self.message = Some(text),
            (name, value) => self.others.push((name.to_string(), value)),
        }
    }
}

impl Visit for Fields {
    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        // `%value` fields arrive here too, written with their `Display`.
        self.put(field, Value::String(format!("{value:?}")));
    }

    fn record_str(&mut self, field: &Field, value: &str) {
        self.put(field, Value::String(value.to_string()));
    }

    fn record_i64(&mut self, field: &Field, value: i64) {
        self.put(field, value.into());
    }

    fn record_u64(&mut self, field: &Field, value: u64) {
        self.put(field, value.into());
    }

    fn record_f64(&mut self, field: &Field, value: f64) {
        self.put(field, value.into());
    }

    fn record_bool(&mut self, field: &Field, value: bool) {
        self.put(field, value.into());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::{Arc, Mutex};
    use tracing_subscriber::fmt::MakeWriter;

    /// Collects what the logger writes.
    #[derive(Clone, Default)]
    struct Sink(Arc<Mutex<Vec<u8>>>);

    impl std::io::Write for Sink {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(buf);
            Ok(buf.len())
        }

        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    impl<'w> MakeWriter<'w> for Sink {
        type Writer = Sink;

        fn make_writer(&'w self) -> Sink {
            self.clone()
        }
    }

    fn logged(format: LogFormat) -> String {
        let sink = Sink::default();
        let error = std::io::Error::other("connection refused");
        tracing::subscriber::with_default(subscriber(format, sink.clone()), || {
            tracing::warn!(signal = "traces", failures = 3_u64, ok = false, %error, "OTLP export failed");
        });
        let bytes = sink.0.lock().unwrap().clone();
        String::from_utf8(bytes).unwrap()
    }

    #[test]
    fn json_lines_carry_the_fields_as_keys() {
        let text = logged(LogFormat::Json);
        let line: Value = serde_json::from_str(text.trim_end()).unwrap();
        assert_eq!(line["level"], "warn");
        assert_eq!(line["message"], "OTLP export failed");
        assert_eq!(line["signal"], "traces");
        assert_eq!(line["failures"], 3);
        assert_eq!(line["ok"], false);
        assert_eq!(line["error"], "connection refused");
        let ts = line["ts"].as_str().unwrap();
        assert!(humantime::parse_rfc3339(ts).is_ok(), "{ts}");
        assert_eq!(text.lines().count(), 1);
    }

    #[test]
    fn text_lines_have_no_colour_codes() {
        let text = logged(LogFormat::Text);
        assert!(text.contains("OTLP export failed"), "{text}");
        assert!(text.contains("signal=\"traces\""), "{text}");
        assert!(!text.contains('\u{1b}'), "{text:?}");
    }

    #[test]
    fn the_format_is_text_json_or_an_error() {
        assert_eq!(LogFormat::parse(None).unwrap(), LogFormat::Text);
        assert_eq!(LogFormat::parse(Some("")).unwrap(), LogFormat::Text);
        assert_eq!(LogFormat::parse(Some("json")).unwrap(), LogFormat::Json);
        let error = LogFormat::parse(Some("logfmt")).unwrap_err().to_string();
        assert!(
            error.contains("TOOLGATE_LOG_FORMAT") && error.contains("logfmt"),
            "{error}"
        );
    }
}
