//! One drafted contract as plain data: the `ToolContract` fields a person reviews and the
//! notes that say what to check. Sources fill these in; nothing here does I/O.

use serde_json::Value;

/// The backend's time budget a draft proposes: the sidecar's own default, stated so the
/// reviewer sees it and can tighten it.
pub const DEFAULT_TIMEOUT_MS: u64 = 10_000;

/// A contract as drafted, before and after review notes.
#[derive(Debug, Clone, PartialEq)]
pub struct Draft {
    /// Where it came from, the document's first comment: `GET /pets/{id}`, `MCP tool x`.
    pub origin: String,
    /// `metadata.name`; [`crate::contracts::name::assign`] fills it in for the whole set.
    pub name: String,
    pub tool: String,
    pub description: Option<String>,
    pub http: Option<Binding>,
    pub idempotent: bool,
    /// Why `idempotent` has its value: the comment printed beside it.
    pub idempotent_why: String,
    pub timeout_ms: u64,
    pub input: Value,
    pub output: Option<Value>,
    pub notes: Vec<Note>,
    /// Set by [`crate::contracts::verify`] when the sidecar's compiler refuses the object:
    /// it is then printed commented out, with this reason.
    pub refused: Option<String>,
}

impl Draft {
    /// A draft of `tool` with an open input and nothing else decided yet.
    pub fn new(origin: String, tool: String) -> Draft {
        Draft {
            origin,
            name: String::new(),
            tool,
            description: None,
            http: None,
            idempotent: false,
            idempotent_why: String::new(),
            timeout_ms: DEFAULT_TIMEOUT_MS,
            input: serde_json::json!({"type": "object"}),
            output: None,
            notes: Vec::new(),
            refused: None,
        }
    }

    pub fn review(&mut self, text: impl Into<String>) {
        self.notes.push(Note::Review(text.into()));
    }

    pub fn info(&mut self, text: impl Into<String>) {
        self.notes.push(Note::Info(text.into()));
    }

    pub fn reviews(&self) -> usize {
        self.notes
            .iter()
            .filter(|n| matches!(n, Note::Review(_)))
            .count()
    }
}

/// The REST binding: an HTTP method and a toolgate path template.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Binding {
    pub method: String,
    pub path: String,
}

/// A comment above a drafted object.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Note {
    /// Something a person must decide: printed `# review: …`.
    Review(String),
    /// Context that needs no decision: printed `# …`.
    Info(String),
}

/// Everything one run drafted: the stream's opening comments, the drafts in order, and
/// warnings for stderr (what was skipped, a token sent in the clear).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Drafted {
    pub header: Vec<String>,
    pub drafts: Vec<Draft>,
    pub warnings: Vec<String>,
}

impl Drafted {
    /// One line for stderr: how many drafts, how many notes to review, how many refused.
    pub fn summary(&self) -> String {
        let refused = self.drafts.iter().filter(|d| d.refused.is_some()).count();
        let reviews: usize = self.drafts.iter().map(Draft::reviews).sum();
        format!(
            "drafted {} contracts ({} left commented out), {} review notes: read every \
             `# review:` line before applying them",
            self.drafts.len() - refused,
            refused,
            reviews + refused
        )
    }
}
