//! The `admission` target: an `AdmissionReview` body → the injector's answer. A patch
//! applies to the pod it was made for, and injecting the result again changes nothing.

use base64::engine::general_purpose::STANDARD as BASE64;
use base64::Engine as _;
use serde_json::Value;
use std::sync::OnceLock;

use crate::inject::review::review;
use crate::inject::settings::SidecarSettings;

/// An `AdmissionReview` body → the injector's answer; an applied patch injects once.
pub fn admission(data: &[u8]) {
    let settings = admission_settings();
    let answer = review(data, settings);
    if answer.status == 400 {
        assert_eq!(answer.outcome, "malformed");
        assert_eq!(answer.body["kind"], "Status");
        return;
    }
    assert_eq!(answer.status, 200);
    let Ok(sent) = serde_json::from_slice::<Value>(data) else {
        panic!("a body that is not JSON was answered 200")
    };
    let response = &answer.body["response"];
    assert_eq!(response["uid"], sent["request"]["uid"]);
    let Some(allowed) = response["allowed"].as_bool() else {
        panic!("no allowed in {response}")
    };
    if !allowed {
        assert!(response["status"]["message"].is_string(), "{response}");
    }
    let Some(encoded) = response["patch"].as_str() else {
        return;
    };
    assert!(
        allowed && response["patchType"] == "JSONPatch",
        "{response}"
    );
    let Ok(bytes) = BASE64.decode(encoded) else {
        panic!("the patch is not base64")
    };
    let ops: json_patch::Patch = match serde_json::from_slice(&bytes) {
        Ok(ops) => ops,
        Err(e) => panic!("the patch is not a JSON Patch: {e}"),
    };
    let mut pod = sent["request"]["object"].clone();
    if let Err(e) = json_patch::patch(&mut pod, &ops) {
        panic!("the patch does not apply to the pod it was made for: {e}");
    }
    let mut again = sent;
    again["request"]["object"] = pod;
    let again = serde_json::to_vec(&again).unwrap_or_default();
    let second = review(&again, settings);
    assert_eq!(second.status, 200, "{}", second.body);
    assert!(
        second.body["response"]["patch"].is_null(),
        "a second pass patched again: {}",
        second.body
    );
}

fn admission_settings() -> &'static SidecarSettings {
    static SETTINGS: OnceLock<SidecarSettings> = OnceLock::new();
    SETTINGS.get_or_init(SidecarSettings::default)
}
