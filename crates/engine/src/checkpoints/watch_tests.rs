//! Watched checkpoints record exactly what a look at every file records.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::os::unix::fs::PermissionsExt as _;
use std::path::Path;
use std::sync::atomic::Ordering;

use super::tests::cps;
use super::*;

/// One workspace checkpointed two ways: watched, and looking at every file each time.
struct Pair {
    watched: Checkpoints,
    full: Checkpoints,
    session: Uuid,
    _dirs: (tempfile::TempDir, tempfile::TempDir),
}

impl Pair {
    fn new() -> Self {
        let (a, b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        let config = |dir: &Path, watch: bool| CheckpointConfig {
            enabled: true,
            dir: dir.to_path_buf(),
            max_file_bytes: 1000,
            exclude: vec!["secrets/".into()],
            watch,
            ..CheckpointConfig::default()
        };
        Self {
            watched: Checkpoints::new(config(a.path(), true)),
            full: Checkpoints::new(config(b.path(), false)),
            session: Uuid::now_v7(),
            _dirs: (a, b),
        }
    }

    /// Checkpoints `w` both ways and checks they agree; `watched` says whether the watched
    /// one must have gone by what changed (not looked at every file).
    async fn step(&self, w: &Path, label: &str, watched: bool) -> Taken {
        let looks = self.watched.full_looks.load(Ordering::Relaxed);
        let a = self
            .watched
            .take(self.session, w, CheckpointKind::AfterRun, None)
            .await
            .unwrap_or_else(|e| panic!("{label}: {e}"));
        let b = self
            .full
            .take(self.session, w, CheckpointKind::AfterRun, None)
            .await
            .unwrap_or_else(|e| panic!("{label}: {e}"));
        let (ta, tb) = (
            tree(&self.watched, w, &a.id).await,
            tree(&self.full, w, &b.id).await,
        );
        if ta != tb {
            let (ga, _) = self.watched.open(w).await.unwrap();
            let (gb, _) = self.full.open(w).await.unwrap();
            let la = ga.run(&["ls-tree", "-r", &ta]).await.unwrap();
            let lb = gb.run(&["ls-tree", "-r", &tb]).await.unwrap();
            panic!(
                "{label}: the watched checkpoint differs\nwatched:\n{}\nevery file:\n{}",
                String::from_utf8_lossy(&la),
                String::from_utf8_lossy(&lb)
            );
        }
        assert_eq!(a.created, b.created, "{label}: created");
        assert_eq!(
            (a.files, a.insertions, a.deletions),
            (b.files, b.insertions, b.deletions),
            "{label}: counts"
        );
        assert_eq!(
            skipped(&self.watched, self.session, w).await,
            skipped(&self.full, self.session, w).await,
            "{label}: skipped"
        );
        let looked = self.watched.full_looks.load(Ordering::Relaxed) > looks;
        assert_eq!(
            looked, !watched,
            "{label}: looked at every file = {looked}, expected {}",
            !watched
        );
        a
    }
}

async fn skipped(c: &Checkpoints, session: Uuid, w: &Path) -> Vec<String> {
    c.list(session, w)
        .await
        .unwrap()
        .last()
        .map(|c| c.skipped.clone())
        .unwrap_or_default()
}

async fn tree(c: &Checkpoints, w: &Path, id: &str) -> String {
    let (git, _) = c.open(w).await.unwrap();
    git.tree_of(id).await.unwrap()
}

fn write(w: &Path, rel: &str, text: &str) {
    let p = w.join(rel);
    std::fs::create_dir_all(p.parent().unwrap()).unwrap();
    std::fs::write(p, text).unwrap();
}

#[tokio::test]
async fn a_watched_checkpoint_records_exactly_what_a_look_at_every_file_records() {
    let ws = tempfile::tempdir().unwrap();
    let w = ws.path();
    write(
        w,
        ".gitignore",
        "*.log\nbuild/\n!keep.log\n/root-only.txt\n",
    );
    write(w, "src/.gitignore", "*.tmp\n!important.tmp\n");
    write(w, "src/main.rs", "fn main() {}\n");
    write(w, "src/lib/a.rs", "a\n");
    write(w, "src/lib/b.rs", "b\n");
    write(w, "docs/guide.md", "guide\n");
    write(w, "old/one.txt", "1\n");
    write(w, "old/deep/two.txt", "2\n");
    write(w, "tool.sh", "#!/bin/sh\n");
    let p = Pair::new();
    p.step(w, "first", false).await;

    write(w, "src/main.rs", "fn main() { run(); }\n");
    write(w, "src/lib/c.rs", "c\n");
    let t = p.step(w, "an edit and a new file", true).await;
    assert!(t.created && t.files == 2, "{t:?}");

    // A new tree of directories, ignored files in it, and a directory git ignores.
    write(w, "new/a/b/c.txt", "c\n");
    write(w, "new/a/b/x.log", "log\n");
    write(w, "new/a/keep.log", "kept\n");
    write(w, "new/a/build/out.o", "obj\n");
    write(w, "src/x.tmp", "tmp\n");
    write(w, "src/important.tmp", "important\n");
    write(w, "root-only.txt", "ignored at the root\n");
    write(w, "new/root-only.txt", "not ignored below it\n");
    write(w, "build/gen.rs", "ignored\n");
    write(w, "secrets/key", "excluded\n");
    p.step(w, "new directories and ignore rules", true).await;

    // Files written in the new directories after the checkpoint watched them.
    write(w, "new/a/b/c.txt", "c2\n");
    write(w, "new/a/b/d/e.txt", "e\n");
    p.step(w, "inside the new directories", true).await;

    std::fs::remove_file(w.join("src/lib/a.rs")).unwrap();
    std::fs::remove_dir_all(w.join("old")).unwrap();
    p.step(w, "a file and a directory deleted", true).await;

    let mode = |rel: &str, m: u32| {
        std::fs::set_permissions(w.join(rel), std::fs::Permissions::from_mode(m)).unwrap();
    };
    mode("tool.sh", 0o755);
    p.step(w, "made executable", true).await;
    mode("tool.sh", 0o644);
    p.step(w, "not executable any more", true).await;

    std::os::unix::fs::symlink("src/main.rs", w.join("link")).unwrap();
    p.step(w, "a symbolic link", true).await;
    std::fs::remove_file(w.join("link")).unwrap();
    std::os::unix::fs::symlink("docs", w.join("link")).unwrap();
    p.step(w, "the link re-pointed", true).await;

    // A file becomes a directory, a directory a file.
    std::fs::remove_file(w.join("docs/guide.md")).unwrap();
    write(w, "docs/guide.md/part1.md", "part 1\n");
    std::fs::remove_dir_all(w.join("src/lib")).unwrap();
    write(w, "src/lib", "now a file\n");
    p.step(w, "a file became a directory and back", true).await;

    // Size: left out when large, back when small.
    write(w, "data.bin", &"x".repeat(5000));
    let t = p.step(w, "a large file", true).await;
    assert!(!t.created, "only a file left out changed");
    write(w, "data.bin", "small now\n");
    p.step(w, "the large file shrank", true).await;
    write(w, "new/big.txt", &"y".repeat(2000));
    p.step(w, "a large file in a watched directory", true).await;

    // Names fast-import needs quoted.
    write(w, "we\"ird\\name.txt", "q\n");
    write(w, "with space.txt", "s\n");
    write(w, "\"starts-with-quote", "q\n");
    p.step(w, "names with quotes", true).await;

    // Rewritten with the same bytes: nothing new.
    write(w, "src/main.rs", "fn main() { run(); }\n");
    let t = p.step(w, "rewritten, unchanged", true).await;
    assert!(!t.created);
    let t = p.step(w, "nothing at all", true).await;
    assert!(!t.created);

    // Everything under a directory emptied and removed.
    std::fs::remove_dir_all(w.join("new/a/b")).unwrap();
    p.step(w, "a nested directory removed", true).await;

    // A directory replaced by a symbolic link to one holding a link: the link is recorded,
    // nothing through it.
    write(w, "shared/real.txt", "r\n");
    std::os::unix::fs::symlink("real.txt", w.join("shared/l")).unwrap();
    write(w, "vend/l", "a file first\n");
    p.step(w, "before the directory becomes a link", true).await;
    std::fs::remove_dir_all(w.join("vend")).unwrap();
    std::os::unix::fs::symlink("shared", w.join("vend")).unwrap();
    p.step(w, "a directory replaced by a link", true).await;

    // Renaming a watched directory: its watches would name the old path.
    std::fs::rename(w.join("new"), w.join("moved")).unwrap();
    p.step(w, "a directory renamed", false).await;
    write(w, "moved/a/after.txt", "after the move\n");
    p.step(w, "inside the renamed directory", true).await;

    // Attributes that convert what git stores: such files are hashed by git itself.
    write(w, "crlf/.gitattributes", "* text\n");
    write(w, "crlf/a.txt", "one\r\ntwo\r\n");
    // (In a new directory: its rules are read as it is walked.)
    p.step(w, "a .gitattributes added", true).await;
    write(w, "crlf/a.txt", "one\r\ntwo\r\nthree\r\n");
    write(w, "crlf/deep/b.txt", "b\r\n");
    write(w, "plain.txt", "kept as is\r\n");
    p.step(w, "files converted by .gitattributes, and one not", true)
        .await;
    // A name ending in a carriage return, which git's line input would drop unquoted.
    write(w, "crlf/cr\r", "x\r\n");
    p.step(w, "a name ending in a carriage return", true).await;
    write(w, "src/.gitattributes", "*.c text\n");
    p.step(w, "a .gitattributes added to a watched directory", false)
        .await;

    // The rules change: every file is looked at, and a recorded file now ignored leaves.
    write(w, "src/.gitignore", "*.tmp\n*.rs\n");
    p.step(w, "a .gitignore changed", false).await;
    write(w, "src/late.rs", "ignored now\n");
    write(w, "src/late.txt", "recorded\n");
    p.step(w, "after the rules changed", true).await;

    // Another repository below the root: recorded by its commit, looked at every time.
    let vendor = w.join("vendor");
    std::fs::create_dir(&vendor).unwrap();
    std::fs::write(vendor.join("lib.c"), "int x;\n").unwrap();
    super::tests::git(&vendor, &["init", "-q"]);
    super::tests::git(&vendor, &["add", "."]);
    super::tests::git(&vendor, &["commit", "-qm", "v"]);
    p.step(w, "a repository below the root", false).await;
    write(w, "src/late.txt", "again\n");
    p.step(w, "with a repository below the root", false).await;
}

#[tokio::test]
async fn a_change_made_just_before_a_checkpoint_is_in_it() {
    let ws = tempfile::tempdir().unwrap();
    let w = ws.path();
    write(w, "a/file.txt", "0\n");
    let data = tempfile::tempdir().unwrap();
    let c = cps(data.path());
    let s = Uuid::now_v7();
    c.take(s, w, CheckpointKind::BeforeRun, None).await.unwrap();
    let looks = c.full_looks.load(Ordering::Relaxed);
    for i in 1..=100 {
        // Written and checkpointed at once: the cookie makes the watcher catch up first.
        write(w, "a/file.txt", &format!("{i}\n"));
        if i % 10 == 0 {
            write(w, &format!("a/new{i}/f.txt"), "new\n");
        }
        let t = c.take(s, w, CheckpointKind::AfterRun, None).await.unwrap();
        assert!(t.created, "change {i} missed");
        let expected = if i % 10 == 0 { 2 } else { 1 };
        assert_eq!(t.files, expected, "change {i}");
    }
    assert_eq!(c.full_looks.load(Ordering::Relaxed), looks, "all watched");
}

#[tokio::test]
async fn unwatched_workspaces_beyond_the_limit_are_looked_at_whole_and_still_right() {
    let data = tempfile::tempdir().unwrap();
    let c = cps(data.path());
    let s = Uuid::now_v7();
    let spaces: Vec<tempfile::TempDir> = (0..MAX_WATCHED + 2)
        .map(|_| tempfile::tempdir().unwrap())
        .collect();
    for ws in &spaces {
        write(ws.path(), "f.txt", "0\n");
        c.take(s, ws.path(), CheckpointKind::BeforeRun, None)
            .await
            .unwrap();
    }
    let watch = c.watcher().unwrap();
    assert_eq!(watch.followed(), MAX_WATCHED, "the oldest dropped");
    // The first workspace is no longer watched: its change is found by a look at all.
    write(spaces[0].path(), "f.txt", "1\n");
    let looks = c.full_looks.load(Ordering::Relaxed);
    let t = c
        .take(s, spaces[0].path(), CheckpointKind::AfterRun, None)
        .await
        .unwrap();
    assert!(t.created && t.files == 1);
    assert_eq!(c.full_looks.load(Ordering::Relaxed), looks + 1);
    assert_eq!(watch.followed(), MAX_WATCHED);
}

#[tokio::test]
async fn a_workspace_inside_a_watched_one_is_looked_at_whole_and_both_stay_right() {
    let ws = tempfile::tempdir().unwrap();
    let outer = ws.path().canonicalize().unwrap();
    let inner = outer.join("pkg");
    write(&outer, "top.txt", "t\n");
    write(&inner, "lib.txt", "l\n");
    let data = tempfile::tempdir().unwrap();
    let c = cps(data.path());
    let (a, b) = (Uuid::now_v7(), Uuid::now_v7());
    c.take(a, &outer, CheckpointKind::BeforeRun, None)
        .await
        .unwrap();
    c.take(b, &inner, CheckpointKind::BeforeRun, None)
        .await
        .unwrap();
    for i in 0..3 {
        write(&inner, "lib.txt", &format!("{i}\n"));
        let looks = c.full_looks.load(Ordering::Relaxed);
        let t = c
            .take(b, &inner, CheckpointKind::AfterRun, None)
            .await
            .unwrap();
        assert!(t.created && t.files == 1, "inner {i}: {t:?}");
        assert_eq!(
            c.full_looks.load(Ordering::Relaxed),
            looks + 1,
            "inner looked at whole"
        );
        let t = c
            .take(a, &outer, CheckpointKind::AfterRun, None)
            .await
            .unwrap();
        assert!(t.created && t.files == 1, "outer {i}: {t:?}");
        assert_eq!(
            c.full_looks.load(Ordering::Relaxed),
            looks + 1,
            "outer still watched"
        );
    }
}
