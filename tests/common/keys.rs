//! Keys, JWKS documents, signed tokens and certificates, all generated per test.
#![allow(dead_code)]

use base64::engine::general_purpose::URL_SAFE_NO_PAD as B64;
use base64::Engine;
use jsonwebtoken::{encode, Algorithm, EncodingKey, Header};
use serde_json::{json, Value};
use std::process::Command;

/// A signing key and the JWK of its public half.
pub struct SigningKey {
    pub alg: Algorithm,
    pub kid: String,
    pub pem: String,
    pub jwk: Value,
}

impl SigningKey {
    /// RSA-2048 via the openssl CLI (fast, unlike unoptimized pure-Rust key generation).
    pub fn rsa(kid: &str) -> SigningKey {
        let pem = run(
            "openssl",
            &[
                "genpkey",
                "-algorithm",
                "RSA",
                "-pkeyopt",
                "rsa_keygen_bits:2048",
            ],
            None,
        );
        let modulus = run("openssl", &["rsa", "-noout", "-modulus"], Some(&pem));
        let hex = modulus.trim().trim_start_matches("Modulus=");
        let n: Vec<u8> = (0..hex.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&hex[i..i + 2], 16).unwrap())
            .collect();
        let jwk = json!({"kty": "RSA", "kid": kid, "alg": "RS256", "use": "sig", "n": B64.encode(n), "e": "AQAB"});
        SigningKey {
            alg: Algorithm::RS256,
            kid: kid.into(),
            pem,
            jwk,
        }
    }

    pub fn ec(kid: &str) -> SigningKey {
        let pair = rcgen::KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).unwrap();
        let raw = pair.public_key_raw();
        let (x, y) = raw[1..].split_at(32);
        let jwk = json!({"kty": "EC", "kid": kid, "crv": "P-256", "alg": "ES256", "x": B64.encode(x), "y": B64.encode(y)});
        SigningKey {
            alg: Algorithm::ES256,
            kid: kid.into(),
            pem: pair.serialize_pem(),
            jwk,
        }
    }

    pub fn ed(kid: &str) -> SigningKey {
        let pair = rcgen::KeyPair::generate_for(&rcgen::PKCS_ED25519).unwrap();
        let jwk = json!({"kty": "OKP", "kid": kid, "crv": "Ed25519", "alg": "EdDSA", "x": B64.encode(pair.public_key_raw())});
        SigningKey {
            alg: Algorithm::EdDSA,
            kid: kid.into(),
            pem: pair.serialize_pem(),
            jwk,
        }
    }

    pub fn sign(&self, claims: &Value) -> String {
        let key = match self.alg {
            Algorithm::RS256 => EncodingKey::from_rsa_pem(self.pem.as_bytes()),
            Algorithm::ES256 => EncodingKey::from_ec_pem(self.pem.as_bytes()),
            _ => EncodingKey::from_ed_pem(self.pem.as_bytes()),
        }
        .unwrap();
        let mut header = Header::new(self.alg);
        header.kid = Some(self.kid.clone());
        encode(&header, claims, &key).unwrap()
    }
}

pub fn jwks(keys: &[&SigningKey]) -> String {
    json!({"keys": keys.iter().map(|k| k.jwk.clone()).collect::<Vec<_>>()}).to_string()
}

pub fn now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs()
}

/// A token with `alg: none` and no signature.
pub fn unsigned(claims: &Value) -> String {
    format!(
        "{}.{}.",
        B64.encode(r#"{"alg":"none","typ":"JWT"}"#),
        B64.encode(claims.to_string())
    )
}

/// An HS256 token whose secret is the RSA key's public JWK text: the classic key-confusion forgery.
pub fn hs256_with(secret: &[u8], claims: &Value) -> String {
    encode(
        &Header::new(Algorithm::HS256),
        claims,
        &EncodingKey::from_secret(secret).unwrap(),
    )
    .unwrap()
}

fn run(cmd: &str, args: &[&str], input: Option<&str>) -> String {
    use std::io::Write;
    let mut child = Command::new(cmd)
        .args(args)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap_or_else(|e| panic!("{cmd} is needed by this test: {e}"));
    if let Some(input) = input {
        child
            .stdin
            .take()
            .unwrap()
            .write_all(input.as_bytes())
            .unwrap();
    } else {
        drop(child.stdin.take());
    }
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "{cmd} {args:?} failed");
    String::from_utf8(out.stdout).unwrap()
}

/// A CA and certificates it signs, for TLS and mTLS tests.
pub struct Pki {
    pub ca_pem: String,
    ca: rcgen::Issuer<'static, rcgen::KeyPair>,
}

impl Pki {
    pub fn new(name: &str) -> Pki {
        let key = rcgen::KeyPair::generate().unwrap();
        let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, name);
        let cert = params.self_signed(&key).unwrap();
        Pki {
            ca_pem: cert.pem(),
            ca: rcgen::Issuer::new(params, key),
        }
    }

    /// (certificate PEM, key PEM) with the given DNS and URI SANs.
    pub fn issue(&self, dns: &[&str], uris: &[&str], client: bool) -> (String, String) {
        let key = rcgen::KeyPair::generate().unwrap();
        let mut params =
            rcgen::CertificateParams::new(dns.iter().map(|d| d.to_string()).collect::<Vec<_>>())
                .unwrap();
        for uri in uris {
            params.subject_alt_names.push(rcgen::SanType::URI(
                rcgen::string::Ia5String::try_from(*uri).unwrap(),
            ));
        }
        params.extended_key_usages = vec![if client {
            rcgen::ExtendedKeyUsagePurpose::ClientAuth
        } else {
            rcgen::ExtendedKeyUsagePurpose::ServerAuth
        }];
        let cert = params.signed_by(&key, &self.ca).unwrap();
        (cert.pem(), key.serialize_pem())
    }
}
