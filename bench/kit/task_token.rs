//! A task token as the demo orchestrator signs it (Ed25519, `examples/keys/`), for the
//! full toolgate's rules that read `task`.

const ORCHESTRATOR_KEY: &[u8] = include_bytes!("../../examples/keys/orchestrator-demo.pem");

/// Valid for an hour; its claims are what the benchmark's rules compare arguments with.
pub fn sign(agent: &str) -> anyhow::Result<String> {
    let key = jsonwebtoken::EncodingKey::from_ed_pem(ORCHESTRATOR_KEY)?;
    let mut header = jsonwebtoken::Header::new(jsonwebtoken::Algorithm::EdDSA);
    header.kid = Some("orchestrator-demo".into());
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)?
        .as_secs();
    let claims = serde_json::json!({
        "iss": "orchestrator",
        "exp": now + 3600,
        "agent": agent,
        "service": "orders",
        "window_minutes": 60,
    });
    Ok(jsonwebtoken::encode(&header, &claims, &key)?)
}
