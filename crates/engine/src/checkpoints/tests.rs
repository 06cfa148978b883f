#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::os::unix::fs::PermissionsExt as _;
use std::path::Path;

use super::*;

pub(super) fn cps(dir: &Path) -> Checkpoints {
    Checkpoints::new(CheckpointConfig {
        enabled: true,
        dir: dir.to_path_buf(),
        ..CheckpointConfig::default()
    })
}

/// Every file under `root` (not descending into `skip`), with its bytes and mode.
fn snapshot(root: &Path, skip: &[&str]) -> BTreeMap<String, (Vec<u8>, u32)> {
    let mut out = BTreeMap::new();
    let mut dirs = vec![root.to_path_buf()];
    while let Some(d) = dirs.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let e = e.unwrap();
            let p = e.path();
            let rel = p.strip_prefix(root).unwrap().to_string_lossy().into_owned();
            if skip
                .iter()
                .any(|s| rel == *s || rel.starts_with(&format!("{s}/")))
            {
                continue;
            }
            let m = std::fs::symlink_metadata(&p).unwrap();
            if m.is_dir() {
                dirs.push(p);
            } else if m.file_type().is_symlink() {
                let t = std::fs::read_link(&p).unwrap();
                out.insert(rel, (t.to_string_lossy().as_bytes().to_vec(), 0o120000));
            } else {
                out.insert(
                    rel,
                    (std::fs::read(&p).unwrap(), m.permissions().mode() & 0o777),
                );
            }
        }
    }
    out
}

/// The one shadow repository under `dir` (the watcher's cookies live beside it).
fn shadow_repo(dir: &Path) -> std::path::PathBuf {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| !p.file_name().unwrap().to_string_lossy().starts_with('.'))
        .unwrap()
}

pub(super) fn git(ws: &Path, args: &[&str]) -> String {
    let out = std::process::Command::new("git")
        .args(args)
        .current_dir(ws)
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("GIT_AUTHOR_NAME", "u")
        .env("GIT_AUTHOR_EMAIL", "u@x")
        .env("GIT_COMMITTER_NAME", "u")
        .env("GIT_COMMITTER_EMAIL", "u@x")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "git {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[tokio::test]
async fn a_run_s_changes_are_diffed_exactly_and_restored_with_their_modes() {
    let data = tempfile::tempdir().unwrap();
    let ws = tempfile::tempdir().unwrap();
    let w = ws.path();
    std::fs::write(w.join("keep.txt"), "same\n").unwrap();
    std::fs::write(w.join("edit.txt"), "one\ntwo\nthree\n").unwrap();
    std::fs::write(w.join("gone.txt"), "bye\n").unwrap();
    std::fs::write(w.join("tool.sh"), "#!/bin/sh\necho hi\n").unwrap();
    let c = cps(data.path());
    let s = Uuid::now_v7();
    let run = Uuid::now_v7();
    let before = c
        .take(s, w, CheckpointKind::BeforeRun, Some(run))
        .await
        .unwrap();
    assert!(before.created);
    let original = snapshot(w, &[]);

    // The "run": create, edit, remove, chmod, symlink, binary.
    std::fs::write(w.join("new.txt"), "fresh\nlines\n").unwrap();
    std::fs::write(w.join("edit.txt"), "one\nTWO\nthree\nfour\n").unwrap();
    std::fs::remove_file(w.join("gone.txt")).unwrap();
    std::fs::set_permissions(w.join("tool.sh"), std::fs::Permissions::from_mode(0o755)).unwrap();
    std::os::unix::fs::symlink("keep.txt", w.join("link")).unwrap();
    std::fs::write(w.join("blob.bin"), [0u8, 1, 2, 0, 255, 0]).unwrap();
    let after = c
        .take(s, w, CheckpointKind::AfterRun, Some(run))
        .await
        .unwrap();
    assert!(after.created);
    assert_eq!((after.files, after.insertions, after.deletions), (6, 5, 2));
    let changed = snapshot(w, &[]);

    let stat = c.stat(s, w, &before.id, &after.id).await.unwrap();
    let paths: Vec<_> = stat.files.iter().map(|f| f.path.as_str()).collect();
    assert_eq!(
        paths,
        [
            "blob.bin", "edit.txt", "gone.txt", "link", "new.txt", "tool.sh"
        ]
    );
    let edit = stat.files.iter().find(|f| f.path == "edit.txt").unwrap();
    assert_eq!(
        (edit.insertions, edit.deletions, edit.binary),
        (2, 1, false)
    );
    assert!(
        stat.files
            .iter()
            .find(|f| f.path == "blob.bin")
            .unwrap()
            .binary
    );
    let diff = c.diff(s, w, &before.id, &after.id, 1 << 20).await.unwrap();
    assert!(diff.contains("-two\n+TWO\n"), "{diff}");
    assert!(diff.contains("+four\n"), "{diff}");
    assert!(diff.contains("deleted file mode 100644"), "{diff}");
    assert!(diff.contains("old mode 100644\nnew mode 100755"), "{diff}");
    assert!(
        diff.contains("Binary files"),
        "binary named, not dumped: {diff}"
    );
    assert!(
        !diff.contains("a/keep.txt"),
        "unchanged files are not in it: {diff}"
    );

    // Nothing changed since: no new checkpoint.
    let again = c.take(s, w, CheckpointKind::BeforeRun, None).await.unwrap();
    assert!(!again.created);
    assert_eq!(again.id, after.id);

    // Restore puts back bytes and modes, and can itself be undone.
    let r = c.restore(s, w, &before.id).await.unwrap();
    assert_eq!(
        r.backup, after.id,
        "nothing changed since the run: the backup is its checkpoint"
    );
    assert_eq!(snapshot(w, &[]), original);
    assert_eq!(r.files, 6);
    let undo = c.restore(s, w, &r.backup).await.unwrap();
    assert_eq!(snapshot(w, &[]), changed);
    assert_eq!(undo.files, 6);

    let list = c.list(s, w).await.unwrap();
    let kinds: Vec<_> = list.iter().map(|c| c.kind).collect();
    assert_eq!(
        kinds,
        [
            CheckpointKind::BeforeRun,
            CheckpointKind::AfterRun,
            CheckpointKind::Restored,
            CheckpointKind::Restored
        ]
    );
    assert_eq!(list[1].run_id, Some(run));
    assert_eq!(list[1].parent.as_deref(), Some(before.id.as_str()));
    // Another session in the same workspace has its own list.
    assert!(c.list(Uuid::now_v7(), w).await.unwrap().is_empty());
    // Ids are checked: not hex, not this session's.
    assert!(matches!(
        c.restore(s, w, "--output=/tmp/x").await,
        Err(CheckpointError::NotFound(_))
    ));
    assert!(matches!(
        c.diff(Uuid::now_v7(), w, &before.id, &after.id, 100).await,
        Err(CheckpointError::NotFound(_))
    ));
}

#[tokio::test]
async fn ignored_excluded_and_oversized_files_are_left_out_and_named() {
    let data = tempfile::tempdir().unwrap();
    let ws = tempfile::tempdir().unwrap();
    let w = ws.path();
    std::fs::write(w.join(".gitignore"), "target/\n*.log\n").unwrap();
    std::fs::create_dir(w.join("target")).unwrap();
    std::fs::write(w.join("target/out.o"), "obj").unwrap();
    std::fs::write(w.join("run.log"), "log").unwrap();
    std::fs::create_dir_all(w.join(".switchboard/inbox")).unwrap();
    std::fs::write(w.join(".switchboard/inbox/a.png"), "png").unwrap();
    std::fs::create_dir(w.join("secrets")).unwrap();
    std::fs::write(w.join("secrets/key"), "k").unwrap();
    // 200 MB (sparse: nothing is written, but it is that large).
    let big = std::fs::File::create(w.join("huge.bin")).unwrap();
    big.set_len(200 * 1024 * 1024).unwrap();
    std::fs::write(w.join("src.rs"), "fn main() {}\n").unwrap();
    let c = Checkpoints::new(CheckpointConfig {
        enabled: true,
        dir: data.path().to_path_buf(),
        exclude: vec!["secrets/".into()],
        ..CheckpointConfig::default()
    });
    let s = Uuid::now_v7();
    let first = c.take(s, w, CheckpointKind::BeforeRun, None).await.unwrap();
    std::fs::write(w.join("src.rs"), "fn main() { println!(); }\n").unwrap();
    c.take(s, w, CheckpointKind::AfterRun, None).await.unwrap();
    let list = c.list(s, w).await.unwrap();
    assert_eq!(list[0].skipped, ["huge.bin"]);
    let (git, _) = c.open(w).await.unwrap();
    let files = String::from_utf8(
        git.run(&["ls-tree", "-r", "--name-only", &first.id])
            .await
            .unwrap(),
    )
    .unwrap();
    assert_eq!(files.lines().collect::<Vec<_>>(), [".gitignore", "src.rs"]);
    // Nothing of the big file went into the objects.
    let size: u64 = walk_size(data.path());
    assert!(
        size < 5 * 1024 * 1024,
        "shadow repository holds {size} bytes"
    );
}

fn walk_size(p: &Path) -> u64 {
    let m = std::fs::symlink_metadata(p).unwrap();
    if m.is_dir() {
        std::fs::read_dir(p)
            .unwrap()
            .map(|e| walk_size(&e.unwrap().path()))
            .sum()
    } else {
        m.len()
    }
}

#[tokio::test]
async fn the_users_own_repository_is_left_byte_for_byte_as_it_was() {
    let data = tempfile::tempdir().unwrap();
    let ws = tempfile::tempdir().unwrap();
    let w = ws.path();
    git(w, &["init", "-q", "-b", "main"]);
    std::fs::write(w.join("a.txt"), "a\n").unwrap();
    git(w, &["add", "a.txt"]);
    git(w, &["commit", "-q", "-m", "first"]);
    std::fs::write(w.join("a.txt"), "a stashed\n").unwrap();
    git(w, &["stash", "-q"]);
    std::fs::write(w.join("b.txt"), "staged\n").unwrap();
    git(w, &["add", "b.txt"]);
    std::fs::write(w.join(".git/hooks/pre-commit"), "#!/bin/sh\nexit 1\n").unwrap();
    std::fs::set_permissions(
        w.join(".git/hooks/pre-commit"),
        std::fs::Permissions::from_mode(0o755),
    )
    .unwrap();
    let dot_git = snapshot(&w.join(".git"), &[]);
    let status = git(w, &["status", "--porcelain"]);

    let c = cps(data.path());
    let s = Uuid::now_v7();
    let before = c.take(s, w, CheckpointKind::BeforeRun, None).await.unwrap();
    std::fs::write(w.join("c.txt"), "agent\n").unwrap();
    std::fs::write(w.join("a.txt"), "agent edit\n").unwrap();
    c.take(s, w, CheckpointKind::AfterRun, None).await.unwrap();
    c.restore(s, w, &before.id).await.unwrap();

    assert_eq!(snapshot(&w.join(".git"), &[]), dot_git, ".git changed");
    assert_eq!(git(w, &["status", "--porcelain"]), status);
    assert_eq!(git(w, &["stash", "list"]).lines().count(), 1);
    // The user's .git is not recorded either.
    let (g, _) = c.open(w).await.unwrap();
    let files = String::from_utf8(
        g.run(&["ls-tree", "-r", "--name-only", &before.id])
            .await
            .unwrap(),
    )
    .unwrap();
    assert!(!files.contains(".git/"), "{files}");
}

#[tokio::test]
async fn a_killed_checkpoint_s_leftovers_do_not_break_the_next_one() {
    let data = tempfile::tempdir().unwrap();
    let ws = tempfile::tempdir().unwrap();
    let w = ws.path();
    std::fs::write(w.join("a.txt"), "a\n").unwrap();
    let s = Uuid::now_v7();
    let first = cps(data.path())
        .take(s, w, CheckpointKind::BeforeRun, None)
        .await
        .unwrap();
    // What git leaves when killed mid-write: lock files, and (a full disk) a torn index.
    let git_dir = shadow_repo(data.path());
    std::fs::write(git_dir.join("index.lock"), "partial").unwrap();
    let refs = git_dir.join(format!("refs/switchboard/{s}"));
    std::fs::write(refs.join("0190.lock"), "").unwrap();
    std::fs::write(git_dir.join("index"), "torn").unwrap();
    // A restarted process (a new `Checkpoints`) carries on.
    std::fs::write(w.join("a.txt"), "b\n").unwrap();
    let c = cps(data.path());
    let next = c.take(s, w, CheckpointKind::AfterRun, None).await.unwrap();
    assert!(next.created);
    assert_eq!((next.files, next.insertions, next.deletions), (1, 1, 1));
    let list = c.list(s, w).await.unwrap();
    assert_eq!(list.len(), 2);
    assert_eq!(list[1].parent.as_deref(), Some(first.id.as_str()));
    assert!(!git_dir.join("index.lock").exists());
}

#[tokio::test]
async fn a_workspace_too_large_or_missing_gets_no_checkpoint() {
    let data = tempfile::tempdir().unwrap();
    let ws = tempfile::tempdir().unwrap();
    for i in 0..12 {
        std::fs::write(ws.path().join(format!("f{i}")), "x").unwrap();
    }
    let c = Checkpoints::new(CheckpointConfig {
        enabled: true,
        dir: data.path().to_path_buf(),
        max_files: 10,
        ..CheckpointConfig::default()
    });
    let s = Uuid::now_v7();
    let e = c
        .take(s, ws.path(), CheckpointKind::BeforeRun, None)
        .await
        .unwrap_err();
    assert!(
        matches!(e, CheckpointError::TooManyFiles { limit: 10 }),
        "{e}"
    );
    let file = ws.path().join("f0");
    let e = c
        .take(s, &file, CheckpointKind::BeforeRun, None)
        .await
        .unwrap_err();
    assert!(matches!(e, CheckpointError::NotADirectory(_)), "{e}");
    let off = cps(data.path());
    let off = Checkpoints::new(CheckpointConfig {
        enabled: false,
        ..off.config.clone()
    });
    assert!(matches!(
        off.take(s, ws.path(), CheckpointKind::BeforeRun, None)
            .await,
        Err(CheckpointError::Disabled)
    ));
}

/// The common layout: the workspace is `$HOME`, which holds the data directory and, in it,
/// the shadow repositories. Nothing of Switchboard's own state is recorded (a checkpoint
/// used to record its own repository and grow by itself at every run), and a repository
/// made before that drops it.
#[tokio::test]
async fn switchboards_own_state_in_the_workspace_is_never_recorded() {
    let home = tempfile::tempdir().unwrap();
    let w = home.path().canonicalize().unwrap();
    let data = w.join(".local/share/switchboard");
    std::fs::create_dir_all(&data).unwrap();
    std::fs::write(data.join("token"), "admin\n").unwrap();
    std::fs::write(w.join("notes.txt"), "mine\n").unwrap();
    let config = CheckpointConfig {
        enabled: true,
        dir: data.join("checkpoints"),
        ..CheckpointConfig::default()
    };
    let s = Uuid::now_v7();
    let tree_names = |id: &str| {
        let repo = shadow_repo(&data.join("checkpoints"));
        let out = std::process::Command::new("git")
            .args(["ls-tree", "-r", "--name-only", id])
            .env("GIT_DIR", &repo)
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    // As before this fix: the state is recorded, and the next checkpoint sees it change.
    let old = Checkpoints::new(config.clone());
    let first = old
        .take(s, &w, CheckpointKind::BeforeRun, None)
        .await
        .unwrap();
    assert!(tree_names(&first.id).contains(".local/share/switchboard/token"));

    let c = Checkpoints::new(config).protecting(crate::ProtectedPaths::new([data.clone()]));
    let cleaned = c
        .take(s, &w, CheckpointKind::BeforeRun, None)
        .await
        .unwrap();
    let names = tree_names(&cleaned.id);
    assert!(!names.contains(".local"), "{names}");
    assert!(names.contains("notes.txt"), "{names}");
    for _ in 0..3 {
        std::fs::write(data.join("token"), format!("{}\n", Uuid::now_v7())).unwrap();
        let again = c
            .take(s, &w, CheckpointKind::BeforeRun, None)
            .await
            .unwrap();
        assert!(!again.created, "nothing of the user's changed");
        assert_eq!(again.id, cleaned.id);
    }
    // A workspace inside the state is never checkpointed.
    let inside = c
        .take(s, &data, CheckpointKind::BeforeRun, None)
        .await
        .unwrap_err();
    assert!(matches!(inside, CheckpointError::Protected(_)), "{inside}");
}
