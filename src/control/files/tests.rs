use super::*;
use crate::input::file::DEFAULT_MAX_POLICY_FILE_BYTES as MAX;
use crate::policy::BuildOptions;
use crate::telemetry::metrics::Metrics;
use std::os::unix::fs::symlink;
use std::time::Instant;

const CONTRACT: &str =
    "apiVersion: toolgate.dev/v1alpha1\nkind: ToolContract\nmetadata: {name: a}\nspec: {tool: a}\n";

fn scan_of(dir: &Path) -> Scan {
    scan(&[dir.to_path_buf()], MAX)
}

fn mkfifo(path: &Path) {
    let status = std::process::Command::new("mkfifo")
        .arg(path)
        .status()
        .unwrap();
    assert!(status.success());
}

#[test]
fn scans_folders_and_skips_hidden_entries() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("a.yaml"), "x: 1").unwrap();
    std::fs::write(dir.path().join("notes.txt"), "x").unwrap();
    std::fs::create_dir(dir.path().join("..data")).unwrap();
    std::fs::write(dir.path().join("..data/b.yaml"), "x: 1").unwrap();
    let s = scan_of(dir.path());
    assert_eq!(s.files.len(), 1);
    assert!(s.errors.is_empty());
    let before = s.fingerprint;
    std::fs::write(dir.path().join("a.yaml"), "x: 2").unwrap();
    assert_ne!(scan_of(dir.path()).fingerprint, before);
}

#[test]
fn missing_path_is_an_error() {
    let s = scan(&[PathBuf::from("/nonexistent/toolgate")], MAX);
    assert_eq!(s.errors.len(), 1);
}

#[test]
fn a_fifo_named_like_a_manifest_is_an_error_not_a_hang() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("a.yaml"), CONTRACT).unwrap();
    mkfifo(&dir.path().join("b.yaml"));
    let started = Instant::now();
    let s = scan_of(dir.path());
    assert!(started.elapsed() < Duration::from_secs(1));
    assert_eq!(s.errors.len(), 1, "{:?}", s.errors);
    let error = s.errors[0].to_string();
    assert!(
        error.contains("b.yaml") && error.contains("not a regular file but a FIFO"),
        "{error}"
    );
    // Named directly, it is refused the same way.
    let s = scan(&[dir.path().join("b.yaml")], MAX);
    assert!(s.errors[0].message.contains("FIFO"), "{:?}", s.errors);
}

#[test]
fn symlinks_to_folders_are_not_followed_and_to_files_are() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("a.yaml"), CONTRACT).unwrap();
    // Loops back to itself, several times over: a walk that followed them would read
    // the same file 8 levels of 4^n times.
    for name in ["loop", "loop.yaml", "again", "up"] {
        symlink(dir.path(), dir.path().join(name)).unwrap();
    }
    symlink("/", dir.path().join("root")).unwrap();
    std::fs::create_dir(dir.path().join("elsewhere")).unwrap();
    let outside = tempfile::tempdir().unwrap();
    std::fs::write(outside.path().join("c.yaml"), CONTRACT).unwrap();
    symlink(outside.path().join("c.yaml"), dir.path().join("c.yaml")).unwrap();
    let started = Instant::now();
    let s = scan_of(dir.path());
    assert!(started.elapsed() < Duration::from_secs(1));
    assert!(s.errors.is_empty(), "{:?}", s.errors);
    let names: Vec<_> = s
        .files
        .iter()
        .map(|(p, _)| p.file_name().unwrap().to_string_lossy().into_owned())
        .collect();
    assert_eq!(names, ["a.yaml", "c.yaml"]);
}

/// A ConfigMap volume as the kubelet writes it: `name.yaml -> ..data/name.yaml`,
/// `..data -> ..<timestamp>`, and an update as one rename of `..data`.
#[test]
fn a_config_map_folder_reads_and_follows_its_atomic_swap() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    let version = |stamp: &str, text: &str| {
        let folder = root.join(stamp);
        std::fs::create_dir(&folder).unwrap();
        std::fs::write(folder.join("policies.yaml"), text).unwrap();
    };
    version("..2026_12_04_10_00_00.000000001", CONTRACT);
    symlink("..2026_12_04_10_00_00.000000001", root.join("..data")).unwrap();
    symlink("..data/policies.yaml", root.join("policies.yaml")).unwrap();
    let s = scan_of(root);
    assert!(s.errors.is_empty(), "{:?}", s.errors);
    assert_eq!(s.files.len(), 1);
    assert_eq!(s.files[0].1, CONTRACT);

    let changed = CONTRACT.replace("{name: a}", "{name: b}");
    version("..2026_12_04_10_05_00.000000002", &changed);
    symlink("..2026_12_04_10_05_00.000000002", root.join("..data_tmp")).unwrap();
    std::fs::rename(root.join("..data_tmp"), root.join("..data")).unwrap();
    std::fs::remove_dir_all(root.join("..2026_12_04_10_00_00.000000001")).unwrap();
    let after = scan_of(root);
    assert!(after.errors.is_empty(), "{:?}", after.errors);
    assert_eq!(after.files[0].1, changed);
    assert_ne!(after.fingerprint, s.fingerprint);
}

#[test]
fn huge_or_deep_trees_and_big_files_are_errors() {
    let dir = tempfile::tempdir().unwrap();
    for i in 0..=MAX_ENTRIES {
        std::fs::write(dir.path().join(format!("{i}.txt")), "").unwrap();
    }
    std::fs::write(dir.path().join("a.yaml"), CONTRACT).unwrap();
    let s = scan_of(dir.path());
    assert!(s.files.is_empty());
    assert!(
        s.errors[0].message.contains("more than 10000 entries"),
        "{:?}",
        s.errors
    );

    let dir = tempfile::tempdir().unwrap();
    let mut deep = dir.path().to_path_buf();
    for _ in 0..=MAX_DEPTH + 1 {
        deep.push("d");
    }
    std::fs::create_dir_all(&deep).unwrap();
    let s = scan_of(dir.path());
    assert!(
        s.errors[0].message.contains("nested more than 8"),
        "{:?}",
        s.errors
    );

    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("a.yaml"), CONTRACT).unwrap();
    let s = scan(&[dir.path().to_path_buf()], 16);
    assert!(
        s.errors[0]
            .message
            .contains("larger than 16 bytes (limits.maxPolicyFileBytes)"),
        "{:?}",
        s.errors
    );
    // Files each within the bound, together over 16 times it.
    for i in 0..20 {
        std::fs::write(dir.path().join(format!("{i}.yaml")), "x".repeat(100)).unwrap();
    }
    std::fs::remove_file(dir.path().join("a.yaml")).unwrap();
    let s = scan(&[dir.path().to_path_buf()], 100);
    assert!(s.files.is_empty());
    assert!(
        s.errors[0]
            .message
            .contains("add up to more than 1600 bytes"),
        "{:?}",
        s.errors
    );
}

#[tokio::test]
async fn a_reload_that_does_not_finish_is_reported_until_it_does() {
    let metrics = Arc::new(Metrics::new());
    let control = Arc::new(Control::new(
        &[SOURCE],
        BuildOptions::default(),
        metrics.clone(),
    ));
    let objects = parse_documents("t", CONTRACT).0;
    control.update(
        SOURCE,
        Update::Replace(objects),
        vec![],
        Strictness::AllOrNothing,
    );
    assert_eq!(metrics.policy_synchronized.get(), 1);
    let (release, blocked) = std::sync::mpsc::channel::<()>();
    let blocked = Mutex::new(Some(blocked));
    let reload = move || {
        // The first run blocks until released; later runs are quick.
        if let Some(wait) = blocked.lock().unwrap().take() {
            let _ = wait.recv();
        }
    };
    let driver = tokio::spawn(drive(
        control.clone(),
        Duration::from_millis(100),
        Arc::new(reload),
    ));
    tokio::time::sleep(Duration::from_millis(400)).await;
    assert_eq!(metrics.policy_synchronized.get(), 0);
    let errors = control.errors().join("\n");
    assert!(errors.contains("has not finished after 0.1 s"), "{errors}");
    release.send(()).unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(metrics.policy_synchronized.get(), 1);
    assert!(control.errors().is_empty());
    driver.abort();
}
