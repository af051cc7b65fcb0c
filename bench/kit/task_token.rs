//! Tokens signed with the demo key (Ed25519, `examples/keys/`): a task token as the demo
//! orchestrator signs it, for the full toolgate's rules that read `task`, and an agent JWT
//! for the "full, agent JWT" target, whose identity is a verified token instead of a
//! static one.

const ORCHESTRATOR_KEY: &[u8] = include_bytes!("../../examples/keys/orchestrator-demo.pem");

/// Valid for an hour; its claims are what the benchmark's rules compare arguments with.
pub fn sign(agent: &str) -> anyhow::Result<String> {
    let now = now()?;
    let claims = serde_json::json!({
        "iss": "orchestrator",
        "exp": now + 3600,
        "agent": agent,
        // The task its session limits and call history key on (DESIGN §16).
        "task_id": "bench-task",
        "service": "orders",
        "window_minutes": 60,
    });
    encode(&claims)
}

/// An agent JWT from the `agents` issuer (audience `toolgate-bench`), valid for an hour.
pub fn sign_agent(agent: &str) -> anyhow::Result<String> {
    let claims = serde_json::json!({
        "iss": "agents",
        "aud": "toolgate-bench",
        "sub": agent,
        "exp": now()? + 3600,
    });
    encode(&claims)
}

fn encode(claims: &serde_json::Value) -> anyhow::Result<String> {
    let key = jsonwebtoken::EncodingKey::from_ed_pem(ORCHESTRATOR_KEY)?;
    let mut header = jsonwebtoken::Header::new(jsonwebtoken::Algorithm::EdDSA);
    header.kid = Some("orchestrator-demo".into());
    Ok(jsonwebtoken::encode(&header, claims, &key)?)
}

fn now() -> anyhow::Result<u64> {
    Ok(std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)?
        .as_secs())
}
