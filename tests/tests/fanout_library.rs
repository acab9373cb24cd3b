//! Fan-out as a library call on both drivers (`agentrun_smol::Runner::fanout` and
//! `agentrun_tokio::Runner::fanout`), with a Claude-dialect harness script that answers at
//! once and behaves by the model it is asked for: `honest` writes the file the verification
//! checks, `lazy` changes nothing, `broken` fails its turn, `slow` waits until it is stopped,
//! `census` changes nothing and notes how many worktrees the repository has.

use std::fs;
use std::future::IntoFuture;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use agentrun_core::fanout::{AttemptStatus, FanOutRecord, Selection};
use agentrun_fs::Store;
use agentrun_process::{AttemptSpec, FanOutOptions, FanOutRun};

const HARNESS: &str = r#"#!/bin/sh
model=""
while [ $# -gt 0 ]; do
  case "$1" in --model) model="$2"; shift;; esac
  shift
done
echo '{"type":"system","subtype":"init","session_id":"s-'"$model"'","model":"'"$model"'"}'
case "$model" in
  honest) echo fixed > fixed.txt ;;
  broken) echo '{"type":"result","subtype":"error_during_execution","is_error":true,"session_id":"s-broken"}'; exit 1 ;;
  slow) echo $$ > "$PIDS/slow-$$"; sleep 600 ;;
  census) git worktree list --porcelain | grep -c '^worktree ' >> "$PIDS/worktrees" ;;
esac
# In an auto session every turn may claim completion; the session's verification decides.
[ -n "$AGENTRUN_RESULT_SINK" ] && printf COMPLETE > "$AGENTRUN_RESULT_SINK"
echo '{"type":"result","subtype":"success","is_error":false,"result":"done","session_id":"s-'"$model"'","total_cost_usd":0.01}'
"#;

struct Fixture {
    tmp: tempfile::TempDir,
    workspace: PathBuf,
    path_var: String,
    pids: PathBuf,
}

fn git(dir: &Path, args: &[&str]) -> String {
    let o = Command::new("git")
        .arg("-C")
        .arg(dir)
        .args(args)
        .env("GIT_AUTHOR_NAME", "t")
        .env("GIT_AUTHOR_EMAIL", "t@t")
        .env("GIT_COMMITTER_NAME", "t")
        .env("GIT_COMMITTER_EMAIL", "t@t")
        .output()
        .unwrap();
    assert!(o.status.success(), "git {args:?}: {o:?}");
    String::from_utf8(o.stdout).unwrap()
}

impl Fixture {
    fn new(repo: bool) -> Fixture {
        let tmp = tempfile::tempdir().unwrap();
        let bin = tmp.path().join("bin");
        fs::create_dir(&bin).unwrap();
        let program = bin.join("claude");
        fs::write(&program, HARNESS).unwrap();
        use std::os::unix::fs::PermissionsExt;
        fs::set_permissions(&program, fs::Permissions::from_mode(0o755)).unwrap();
        let workspace = tmp.path().join("work");
        fs::create_dir(&workspace).unwrap();
        fs::write(workspace.join("README"), "base\n").unwrap();
        if repo {
            git(&workspace, &["init", "-q"]);
            git(&workspace, &["add", "README"]);
            git(&workspace, &["commit", "-qm", "base"]);
        }
        let pids = tmp.path().join("pids");
        fs::create_dir(&pids).unwrap();
        Fixture {
            path_var: format!("{}:/usr/bin:/bin", bin.display()),
            tmp,
            workspace,
            pids,
        }
    }

    fn store(&self) -> Store {
        Store::open(self.tmp.path().join("store")).unwrap()
    }

    fn options(&self, models: &[&str]) -> FanOutOptions {
        let attempts = models
            .iter()
            .map(|m| AttemptSpec::parse(&format!("claude:{m}")).unwrap())
            .collect();
        FanOutOptions::new(attempts, "fix it")
            .workspace(&self.workspace)
            .env("PATH", &self.path_var)
            .env("PIDS", &self.pids)
            .verify("test -f fixed.txt")
    }

    /// The workspace is as the test left it: no new file, a clean status.
    fn assert_workspace_untouched(&self, repo: bool) {
        let names: Vec<_> = fs::read_dir(&self.workspace)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|n| n != ".git")
            .collect();
        assert_eq!(names, ["README"]);
        if repo {
            assert_eq!(git(&self.workspace, &["status", "--porcelain"]), "");
        }
    }
}

fn tokio_block_on<T>(f: impl std::future::Future<Output = T>) -> T {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
        .block_on(f)
}

fn check_honest_wins(fx: &Fixture, run: &FanOutRun, honest: usize) {
    let r = &run.record;
    assert_eq!(r.winner, Some(honest), "{r:#?}");
    assert!(run.errors.is_empty(), "{:?}", run.errors);
    let w = &r.attempts[honest];
    assert_eq!(w.status, AttemptStatus::Succeeded);
    assert_eq!(w.verified, Some(true));
    assert_eq!(w.verification.as_ref().unwrap().exit_code, Some(0));
    let worktree = PathBuf::from(w.worktree.as_ref().expect("the winner's worktree is kept"));
    assert_eq!(
        fs::read_to_string(worktree.join("fixed.txt")).unwrap(),
        "fixed\n"
    );
    let branch = w.branch.as_ref().unwrap();
    assert_eq!(branch, &format!("agentrun/{}/{honest}", r.fanout_id));
    // The change is committed on the branch, ready to merge.
    let files = git(&fx.workspace, &["diff", "--name-only", "HEAD", branch]);
    assert_eq!(files, "fixed.txt\n");
    let c = w.changes.unwrap();
    assert_eq!((c.files, c.insertions, c.deletions), (1, 1, 0));
    assert_eq!(w.session_id.as_deref(), Some("s-honest"));
    for (n, a) in r.attempts.iter().enumerate().filter(|(n, _)| *n != honest) {
        assert_eq!(a.worktree, None, "attempt {n}: {a:?}");
        assert_eq!(a.branch, None);
        assert!(
            !fx.store()
                .root()
                .join(format!("fanouts/{}/worktrees/{n}", r.fanout_id))
                .exists()
        );
    }
    let branches = git(
        &fx.workspace,
        &[
            "branch",
            "--list",
            "--format=%(refname:short)",
            "agentrun/*",
        ],
    );
    assert_eq!(branches.trim(), branch);
    fx.assert_workspace_untouched(true);
    // The store holds the same record.
    let kept: FanOutRecord = agentrun_fs::fanout::read_record(&fx.store(), &r.fanout_id).unwrap();
    assert_eq!(&kept, r);
}

#[test]
fn smol_the_verified_attempt_wins_and_the_losers_are_removed() {
    let fx = Fixture::new(true);
    let runner = agentrun_smol::Runner::new(fx.store());
    let run = smol::block_on(
        runner
            .fanout(
                fx.options(&["lazy", "broken", "honest"])
                    .select(Selection::All),
            )
            .into_future(),
    )
    .unwrap();
    check_honest_wins(&fx, &run, 2);
    let r = &run.record;
    // --select all: every attempt is reported with its verification.
    assert_eq!(r.attempts[0].status, AttemptStatus::Succeeded);
    assert_eq!(r.attempts[0].verified, Some(false));
    assert_eq!(
        r.attempts[0].verification.as_ref().unwrap().exit_code,
        Some(1)
    );
    assert_eq!(r.attempts[1].status, AttemptStatus::Failed);
    assert_eq!(r.attempts[1].verification, None);
    assert_eq!(run.exit_code(), 0);
}

#[test]
fn tokio_first_verified_stops_the_others_and_leaves_no_process() {
    let fx = Fixture::new(true);
    let runner = agentrun_tokio::Runner::new(fx.store());
    let started = Instant::now();
    let run = tokio_block_on(
        runner
            .fanout(fx.options(&["slow", "honest", "slow"]))
            .into_future(),
    )
    .unwrap();
    assert!(
        started.elapsed() < Duration::from_secs(300),
        "the slow ones were stopped"
    );
    check_honest_wins(&fx, &run, 1);
    for n in [0, 2] {
        let a = &run.record.attempts[n];
        assert_eq!(a.status, AttemptStatus::Stopped, "{a:?}");
        assert_eq!(a.verified, None);
    }
    for pid in fs::read_dir(&fx.pids).unwrap() {
        let name = pid.unwrap().file_name().to_string_lossy().into_owned();
        let pid: i32 = name.trim_start_matches("slow-").parse().unwrap();
        let alive = Command::new("kill")
            .args(["-0", &pid.to_string()])
            .status()
            .unwrap();
        assert!(
            !alive.success(),
            "process {pid} of a stopped attempt still runs"
        );
    }
}

#[test]
fn outside_a_repository_each_attempt_gets_a_private_copy() {
    let fx = Fixture::new(false);
    let runner = agentrun_smol::Runner::new(fx.store());
    let run = smol::block_on(
        runner
            .fanout(fx.options(&["lazy", "honest"]).jobs(1))
            .into_future(),
    )
    .unwrap();
    let r = &run.record;
    assert_eq!(r.winner, Some(1), "{r:#?}");
    let w = &r.attempts[1];
    assert_eq!(w.branch, None);
    let copy = PathBuf::from(w.worktree.as_ref().unwrap());
    assert!(copy.join("fixed.txt").exists());
    assert_eq!(fs::read_to_string(copy.join("README")).unwrap(), "base\n");
    assert_eq!(w.changes.unwrap().files, 1);
    assert_eq!(r.attempts[0].worktree, None);
    fx.assert_workspace_untouched(false);
}

#[test]
fn sixteen_attempts_in_one_repository_never_hit_a_git_lock() {
    let fx = Fixture::new(true);
    let runner = agentrun_smol::Runner::new(fx.store());
    let models = ["honest"; 16];
    let run = smol::block_on(
        runner
            .fanout(
                fx.options(&models)
                    .jobs(16)
                    .select(Selection::All)
                    .keep(true),
            )
            .into_future(),
    )
    .unwrap();
    assert!(run.errors.is_empty(), "{:?}", run.errors);
    for (n, a) in run.record.attempts.iter().enumerate() {
        assert_eq!(a.status, AttemptStatus::Succeeded, "attempt {n}: {a:?}");
        assert_eq!(a.verified, Some(true), "attempt {n}");
        assert!(a.branch.is_some());
    }
    let branches = git(
        &fx.workspace,
        &[
            "branch",
            "--list",
            "--format=%(refname:short)",
            "agentrun/*",
        ],
    );
    assert_eq!(branches.lines().count(), 16, "{branches}");
    fx.assert_workspace_untouched(true);
}

/// A loser's worktree goes as soon as it has lost, not at the end: one attempt after another,
/// each sees only the workspace's worktree and its own.
#[test]
fn a_losers_worktree_is_removed_before_the_next_attempt_starts() {
    let fx = Fixture::new(true);
    let runner = agentrun_smol::Runner::new(fx.store());
    let run = smol::block_on(
        runner
            .fanout(fx.options(&["census"; 4]).jobs(1).select(Selection::All))
            .into_future(),
    )
    .unwrap();
    assert!(run.errors.is_empty(), "{:?}", run.errors);
    assert_eq!(run.record.winner, None, "nothing passed the verification");
    let seen = fs::read_to_string(fx.pids.join("worktrees")).unwrap();
    assert_eq!(seen, "2\n2\n2\n2\n");
    for a in &run.record.attempts {
        assert_eq!(
            (a.status, a.verified),
            (AttemptStatus::Succeeded, Some(false))
        );
        assert_eq!(a.worktree, None, "{a:?}");
    }
    assert_eq!(
        git(&fx.workspace, &["worktree", "list", "--porcelain"])
            .matches("worktree ")
            .count(),
        1
    );
    fx.assert_workspace_untouched(true);
}

#[test]
fn without_a_winner_the_exit_code_is_one_and_bad_input_is_refused() {
    let fx = Fixture::new(true);
    let runner = agentrun_smol::Runner::new(fx.store());
    let run = smol::block_on(runner.fanout(fx.options(&["lazy", "broken"])).into_future()).unwrap();
    assert_eq!(run.record.winner, None);
    assert_eq!(run.exit_code(), 1);
    let err = smol::block_on(runner.fanout(fx.options(&[]).jobs(1)).into_future()).unwrap_err();
    assert!(err.to_string().contains("at least one attempt"), "{err}");
    let err =
        smol::block_on(runner.fanout(fx.options(&["lazy"]).jobs(0)).into_future()).unwrap_err();
    assert!(err.to_string().contains("jobs"), "{err}");
}

#[test]
fn with_auto_each_attempt_is_a_whole_session_verified_by_the_fan_out() {
    let fx = Fixture::new(true);
    let runner = agentrun_smol::Runner::new(fx.store());
    let run = smol::block_on(
        runner
            .fanout(
                fx.options(&["lazy", "honest"])
                    .auto(true)
                    .max_turns(4)
                    .select(Selection::All),
            )
            .into_future(),
    )
    .unwrap();
    let r = &run.record;
    assert_eq!(r.winner, Some(1), "{r:#?} {:?}", run.errors);
    // The lazy session never passed its verification: it ran out of turns.
    assert_eq!(r.attempts[0].status, AttemptStatus::Failed, "{r:#?}");
    assert_eq!(r.attempts[1].verified, Some(true));
    // Its turns' output is kept.
    assert!(r.attempts[1].artifacts.len() >= 2, "{r:#?}");
    fx.assert_workspace_untouched(true);
}

#[test]
fn a_silent_attempt_is_stopped_by_the_stall_timeout_and_cannot_win() {
    let fx = Fixture::new(true);
    let runner = agentrun_smol::Runner::new(fx.store());
    let run = smol::block_on(
        runner
            .fanout(
                fx.options(&["slow", "honest"])
                    .select(Selection::All)
                    .stall_timeout(Duration::from_secs(3)),
            )
            .into_future(),
    )
    .unwrap();
    let r = &run.record;
    assert_eq!(r.winner, Some(1), "{r:#?}");
    let slow = &r.attempts[0];
    assert_eq!(slow.status, AttemptStatus::Failed, "{slow:#?}");
    assert_eq!(
        slow.failure_kind,
        Some(agentrun_core::harness::FailureKind::Stalled),
        "{slow:#?}"
    );
    // The stalled harness is gone: its pid file names a process that no longer runs.
    for entry in fs::read_dir(&fx.pids).unwrap() {
        let pid = fs::read_to_string(entry.unwrap().path()).unwrap();
        assert!(
            !Path::new(&format!("/proc/{}", pid.trim())).exists(),
            "the stalled harness {pid} still runs"
        );
    }
}
