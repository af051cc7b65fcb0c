//! Golden tests of the injector's decision: every `AdmissionReview` in
//! `tests/fixtures/inject/` (and its subfolders, each with the `settings.yaml` it is run
//! with) must produce exactly the JSON Patch in the `.patch.json` beside it (`[]` when the
//! pod is left alone), or — for a pod the injector refuses — `allowed: false` with exactly
//! the message in the `.refusal.txt` beside it. Then the patch is applied, and injecting
//! the result again must change nothing.
//!
//! `TOOLGATE_BLESS=1 cargo test --test inject_golden` rewrites the `.patch.json` and
//! `.refusal.txt` files; review the diff before committing it.

use base64::engine::general_purpose::STANDARD as BASE64;
use base64::Engine as _;
use serde_json::Value;
use std::path::{Path, PathBuf};

use toolgate::inject::review::review;
use toolgate::inject::settings::InjectSettings;

fn fixtures_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/inject")
}

/// Each folder that has a `settings.yaml`, with its review fixtures in name order.
fn suites() -> Vec<(PathBuf, Vec<PathBuf>)> {
    let mut folders = vec![fixtures_root()];
    for entry in std::fs::read_dir(fixtures_root()).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            folders.push(path);
        }
    }
    folders.sort();
    folders
        .into_iter()
        .map(|folder| {
            let mut reviews: Vec<PathBuf> = std::fs::read_dir(&folder)
                .unwrap()
                .map(|e| e.unwrap().path())
                .filter(|p| {
                    let name = p.file_name().unwrap().to_string_lossy();
                    name.ends_with(".json") && !name.ends_with(".patch.json")
                })
                .collect();
            reviews.sort();
            (folder, reviews)
        })
        .collect()
}

/// What the injector answered a review: its JSON Patch (`[]` when there is none), or
/// the message it refused the pod with.
enum Answer {
    Patch(Value),
    Refused(String),
}

fn answer_of(body: &[u8], settings: &InjectSettings) -> Answer {
    let answer = review(body, &settings.sidecar);
    assert_eq!(answer.status, 200, "{}", answer.body);
    let response = &answer.body["response"];
    if response["allowed"] == false {
        assert_eq!(response["status"]["code"], 400, "{response}");
        return Answer::Refused(response["status"]["message"].as_str().unwrap().to_string());
    }
    assert_eq!(response["allowed"], true, "{response}");
    Answer::Patch(match response["patch"].as_str() {
        Some(b64) => serde_json::from_slice(&BASE64.decode(b64).unwrap()).unwrap(),
        None => Value::Array(vec![]),
    })
}

/// The decoded JSON Patch of a review answer, `[]` when there is none.
fn patch_of(body: &[u8], settings: &InjectSettings) -> Value {
    match answer_of(body, settings) {
        Answer::Patch(patch) => patch,
        Answer::Refused(why) => panic!("refused: {why}"),
    }
}

fn golden_path(review: &Path) -> PathBuf {
    review.with_extension("patch.json")
}

fn refusal_path(review: &Path) -> PathBuf {
    review.with_extension("refusal.txt")
}

#[test]
fn reviews_produce_the_golden_patches() {
    let bless = std::env::var_os("TOOLGATE_BLESS").is_some();
    let (mut injected, mut untouched, mut refused) = (0, 0, 0);
    for (folder, reviews) in suites() {
        let settings = InjectSettings::load(Some(&folder.join("settings.yaml")), Vec::new())
            .unwrap_or_else(|e| panic!("{}: {e}", folder.display()));
        for path in reviews {
            let body = std::fs::read(&path).unwrap();
            let patch = match answer_of(&body, &settings) {
                Answer::Patch(patch) => patch,
                Answer::Refused(why) => {
                    let golden = refusal_path(&path);
                    if bless {
                        std::fs::write(&golden, format!("{why}\n")).unwrap();
                    }
                    let expected = std::fs::read_to_string(&golden).unwrap_or_else(|_| {
                        panic!(
                            "{} was refused ({why}) but has no {}: run TOOLGATE_BLESS=1 cargo test --test inject_golden",
                            path.display(),
                            golden.display()
                        )
                    });
                    assert_eq!(expected.trim_end(), why, "{}", path.display());
                    assert!(
                        !golden_path(&path).exists(),
                        "{} is refused",
                        path.display()
                    );
                    refused += 1;
                    continue;
                }
            };
            assert!(
                !refusal_path(&path).exists(),
                "{} was injected, not refused",
                path.display()
            );
            let text = serde_json::to_string_pretty(&patch).unwrap() + "\n";
            let golden = golden_path(&path);
            if bless {
                std::fs::write(&golden, &text).unwrap();
            }
            let expected = std::fs::read_to_string(&golden).unwrap_or_else(|_| {
                panic!(
                    "{} has no golden patch: run TOOLGATE_BLESS=1 cargo test --test inject_golden",
                    path.display()
                )
            });
            assert!(
                expected == text,
                "{}: the patch differs from {}:\n{text}\n(TOOLGATE_BLESS=1 rewrites it)",
                path.display(),
                golden.display()
            );
            if patch.as_array().unwrap().is_empty() {
                untouched += 1;
            } else {
                injected += 1;
            }
        }
    }
    assert!(
        injected >= 3 && untouched >= 3 && refused >= 7,
        "the fixtures must cover every outcome"
    );
}

#[test]
fn every_golden_has_its_review() {
    for (folder, reviews) in suites() {
        for entry in std::fs::read_dir(&folder).unwrap() {
            let path = entry.unwrap().path();
            let name = path.file_name().unwrap().to_string_lossy().into_owned();
            if let Some(stem) = name
                .strip_suffix(".patch.json")
                .or_else(|| name.strip_suffix(".refusal.txt"))
            {
                assert!(
                    reviews.contains(&folder.join(format!("{stem}.json"))),
                    "{} is left over: its review is gone",
                    path.display()
                );
            }
        }
    }
}

#[test]
fn an_injected_pod_is_never_injected_again() {
    for (folder, reviews) in suites() {
        let settings =
            InjectSettings::load(Some(&folder.join("settings.yaml")), Vec::new()).unwrap();
        for path in reviews {
            let mut review: Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
            if refusal_path(&path).exists() {
                continue;
            }
            let patch = patch_of(&serde_json::to_vec(&review).unwrap(), &settings);
            let patch: json_patch::Patch = serde_json::from_value(patch).unwrap();
            let pod = &mut review["request"]["object"];
            json_patch::patch(pod, &patch)
                .unwrap_or_else(|e| panic!("{}: the patch does not apply: {e}", path.display()));
            let again = patch_of(&serde_json::to_vec(&review).unwrap(), &settings);
            assert_eq!(again, Value::Array(vec![]), "{}", path.display());
        }
    }
}
