//! The process-driver conformance suite (process runs and the clean result channel): every scenario
//! is one generic function over [`Driver`], instantiated for agentrun-smol and agentrun-tokio by
//! [`conformance!`], so both drivers pass the identical suite.
//!
//! Fake agents are `sh -c` scripts (the runner itself never uses a shell: the scripts are
//! ordinary argv) and the `fake_agent` binary of this crate for the gigabyte flood.

use std::fs;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use agentrun_core::process::OptionsError;
use agentrun_core::{ArtifactUri, CaptureStatus, ResultRecord};
use agentrun_fs::Store;
use agentrun_smol::{
    DEFAULT_SINK_VAR, Exit, FileKind, NotReadReason, ProcessResult, ResultSink, RunError,
    RunOptions, RunOutcome, RunProgress, SinkOutcome, StdinMode,
};
use agentrun_tests::processes::ended;

/// One process driver, driven from a synchronous test.
/// The pipe a live tap is on.
#[derive(Debug, Clone, Copy)]
enum Tap {
    Stdout,
    Stderr,
}

impl Tap {
    fn stream(self) -> &'static str {
        match self {
            Tap::Stdout => "stdout",
            Tap::Stderr => "stderr",
        }
    }

    /// A shell prefix that swaps stdout and stderr when the tap is on stderr, so one script
    /// writes its tapped output to the tapped pipe either way.
    fn redirect(self) -> &'static str {
        match self {
            Tap::Stdout => "",
            Tap::Stderr => "exec 3>&1 1>&2 2>&3 3>&-; ",
        }
    }
}

trait Driver {
    /// Runs one process to its end.
    fn run(store: &Store, options: RunOptions) -> Result<ProcessResult, RunError>;
    /// Runs one process to its end with a live tap on one pipe (`RunBuilder::observe_stdout`
    /// or `observe_stderr`).
    fn run_observed(
        store: &Store,
        options: RunOptions,
        tap: Tap,
        observer: impl FnMut(&[u8]) + Send + 'static,
    ) -> Result<ProcessResult, RunError>;
    /// Runs one process to its end with progress reports every `every`
    /// (`RunBuilder::on_progress`).
    fn run_reporting(
        store: &Store,
        options: RunOptions,
        every: Duration,
        report: impl FnMut(&RunProgress) + Send + 'static,
    ) -> Result<ProcessResult, RunError>;
    /// Runs one process to its end, calling `ended` when it has ended
    /// (`RunBuilder::on_ended`).
    fn run_with_ended(
        store: &Store,
        options: RunOptions,
        ended: impl FnOnce() + Send + 'static,
    ) -> Result<ProcessResult, RunError>;
    /// Runs all of them concurrently on the runtime.
    fn run_all(store: &Store, all: Vec<RunOptions>) -> Vec<Result<ProcessResult, RunError>>;
    /// Runs one process with a stop future that resolves after `after` (`RunBuilder::stop_on`).
    fn run_stopped_after(
        store: &Store,
        options: RunOptions,
        after: Duration,
    ) -> Result<ProcessResult, RunError>;
    /// Runs one process with a stop future that resolves once `ready` exists (looked at every
    /// 20 ms), so the stop comes when the child is ready for it, however loaded the machine.
    fn run_stopped_when(
        store: &Store,
        options: RunOptions,
        ready: PathBuf,
    ) -> Result<ProcessResult, RunError>;
    /// Runs one process and drops the run future once `ready` exists (looked at every 20 ms).
    fn run_dropped_when(store: &Store, options: RunOptions, ready: PathBuf);
    /// Runs one process with a stop request after each delay of `requests` (counted from the
    /// previous one), through `RunBuilder::cancel_on`.
    fn run_with_stop_requests(
        store: &Store,
        options: RunOptions,
        requests: Vec<Duration>,
    ) -> Result<ProcessResult, RunError>;
    /// Runs one process and drops the run future after `after` (`None`: it was dropped).
    fn run_dropped_after(
        store: &Store,
        options: RunOptions,
        after: Duration,
    ) -> Option<Result<ProcessResult, RunError>>;
}

struct Smol;

impl Driver for Smol {
    fn run(store: &Store, options: RunOptions) -> Result<ProcessResult, RunError> {
        ::smol::block_on(
            agentrun_smol::Runner::new(store.clone())
                .run(options)
                .into_future(),
        )
    }

    fn run_observed(
        store: &Store,
        options: RunOptions,
        tap: Tap,
        observer: impl FnMut(&[u8]) + Send + 'static,
    ) -> Result<ProcessResult, RunError> {
        let runner = agentrun_smol::Runner::new(store.clone());
        let run = runner.run(options);
        let run = match tap {
            Tap::Stdout => run.observe_stdout(observer),
            Tap::Stderr => run.observe_stderr(observer),
        };
        ::smol::block_on(run.into_future())
    }

    fn run_reporting(
        store: &Store,
        options: RunOptions,
        every: Duration,
        report: impl FnMut(&RunProgress) + Send + 'static,
    ) -> Result<ProcessResult, RunError> {
        let runner = agentrun_smol::Runner::new(store.clone());
        ::smol::block_on(runner.run(options).on_progress(every, report).into_future())
    }

    fn run_with_ended(
        store: &Store,
        options: RunOptions,
        ended: impl FnOnce() + Send + 'static,
    ) -> Result<ProcessResult, RunError> {
        let runner = agentrun_smol::Runner::new(store.clone());
        ::smol::block_on(runner.run(options).on_ended(ended).into_future())
    }

    fn run_all(store: &Store, all: Vec<RunOptions>) -> Vec<Result<ProcessResult, RunError>> {
        ::smol::block_on(async {
            let tasks: Vec<_> = all
                .into_iter()
                .map(|o| {
                    let runner = agentrun_smol::Runner::new(store.clone());
                    ::smol::spawn(async move { runner.run(o).await })
                })
                .collect();
            let mut results = Vec::new();
            for task in tasks {
                results.push(task.await);
            }
            results
        })
    }

    fn run_stopped_after(
        store: &Store,
        options: RunOptions,
        after: Duration,
    ) -> Result<ProcessResult, RunError> {
        let runner = agentrun_smol::Runner::new(store.clone());
        ::smol::block_on(
            runner
                .run(options)
                .stop_on(async move {
                    ::smol::Timer::after(after).await;
                })
                .into_future(),
        )
    }

    fn run_stopped_when(
        store: &Store,
        options: RunOptions,
        ready: PathBuf,
    ) -> Result<ProcessResult, RunError> {
        let runner = agentrun_smol::Runner::new(store.clone());
        ::smol::block_on(
            runner
                .run(options)
                .stop_on(async move {
                    while !ready.exists() {
                        ::smol::Timer::after(Duration::from_millis(20)).await;
                    }
                })
                .into_future(),
        )
    }

    fn run_dropped_when(store: &Store, options: RunOptions, ready: PathBuf) {
        let runner = agentrun_smol::Runner::new(store.clone());
        let ended = ::smol::block_on(::smol::future::or(
            async { Some(runner.run(options).await) },
            async {
                while !ready.exists() {
                    ::smol::Timer::after(Duration::from_millis(20)).await;
                }
                None
            },
        ));
        assert!(ended.is_none(), "the run ended before it was dropped");
    }

    fn run_with_stop_requests(
        store: &Store,
        options: RunOptions,
        requests: Vec<Duration>,
    ) -> Result<ProcessResult, RunError> {
        let runner = agentrun_smol::Runner::new(store.clone());
        let requests = ::smol::stream::unfold(requests.into_iter(), |mut delays| async move {
            ::smol::Timer::after(delays.next()?).await;
            Some(((), delays))
        });
        ::smol::block_on(runner.run(options).cancel_on(requests).into_future())
    }

    fn run_dropped_after(
        store: &Store,
        options: RunOptions,
        after: Duration,
    ) -> Option<Result<ProcessResult, RunError>> {
        let runner = agentrun_smol::Runner::new(store.clone());
        ::smol::block_on(::smol::future::or(
            async { Some(runner.run(options).await) },
            async {
                ::smol::Timer::after(after).await;
                None
            },
        ))
    }
}

struct Tokio;

fn tokio_runtime() -> &'static ::tokio::runtime::Runtime {
    static RT: OnceLock<::tokio::runtime::Runtime> = OnceLock::new();
    RT.get_or_init(|| {
        ::tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .expect("a tokio runtime")
    })
}

impl Driver for Tokio {
    fn run(store: &Store, options: RunOptions) -> Result<ProcessResult, RunError> {
        tokio_runtime().block_on(
            agentrun_tokio::Runner::new(store.clone())
                .run(options)
                .into_future(),
        )
    }

    fn run_observed(
        store: &Store,
        options: RunOptions,
        tap: Tap,
        observer: impl FnMut(&[u8]) + Send + 'static,
    ) -> Result<ProcessResult, RunError> {
        let runner = agentrun_tokio::Runner::new(store.clone());
        let run = runner.run(options);
        let run = match tap {
            Tap::Stdout => run.observe_stdout(observer),
            Tap::Stderr => run.observe_stderr(observer),
        };
        tokio_runtime().block_on(run.into_future())
    }

    fn run_reporting(
        store: &Store,
        options: RunOptions,
        every: Duration,
        report: impl FnMut(&RunProgress) + Send + 'static,
    ) -> Result<ProcessResult, RunError> {
        let runner = agentrun_tokio::Runner::new(store.clone());
        tokio_runtime().block_on(runner.run(options).on_progress(every, report).into_future())
    }

    fn run_with_ended(
        store: &Store,
        options: RunOptions,
        ended: impl FnOnce() + Send + 'static,
    ) -> Result<ProcessResult, RunError> {
        let runner = agentrun_tokio::Runner::new(store.clone());
        tokio_runtime().block_on(runner.run(options).on_ended(ended).into_future())
    }

    fn run_all(store: &Store, all: Vec<RunOptions>) -> Vec<Result<ProcessResult, RunError>> {
        let rt = tokio_runtime();
        rt.block_on(async {
            let tasks: Vec<_> = all
                .into_iter()
                .map(|o| {
                    let runner = agentrun_tokio::Runner::new(store.clone());
                    ::tokio::spawn(async move { runner.run(o).await })
                })
                .collect();
            let mut results = Vec::new();
            for task in tasks {
                results.push(task.await.expect("the run task does not panic"));
            }
            results
        })
    }

    fn run_stopped_after(
        store: &Store,
        options: RunOptions,
        after: Duration,
    ) -> Result<ProcessResult, RunError> {
        let runner = agentrun_tokio::Runner::new(store.clone());
        tokio_runtime().block_on(
            runner
                .run(options)
                .stop_on(async move {
                    ::tokio::time::sleep(after).await;
                })
                .into_future(),
        )
    }

    fn run_stopped_when(
        store: &Store,
        options: RunOptions,
        ready: PathBuf,
    ) -> Result<ProcessResult, RunError> {
        let runner = agentrun_tokio::Runner::new(store.clone());
        tokio_runtime().block_on(
            runner
                .run(options)
                .stop_on(async move {
                    while !ready.exists() {
                        ::tokio::time::sleep(Duration::from_millis(20)).await;
                    }
                })
                .into_future(),
        )
    }

    fn run_dropped_when(store: &Store, options: RunOptions, ready: PathBuf) {
        let runner = agentrun_tokio::Runner::new(store.clone());
        let ended = tokio_runtime().block_on(async {
            ::tokio::select! {
                result = runner.run(options).into_future() => Some(result),
                () = async {
                    while !ready.exists() {
                        ::tokio::time::sleep(Duration::from_millis(20)).await;
                    }
                } => None,
            }
        });
        assert!(ended.is_none(), "the run ended before it was dropped");
    }

    fn run_with_stop_requests(
        store: &Store,
        options: RunOptions,
        requests: Vec<Duration>,
    ) -> Result<ProcessResult, RunError> {
        let runner = agentrun_tokio::Runner::new(store.clone());
        let requests = ::smol::stream::unfold(requests.into_iter(), |mut delays| async move {
            ::tokio::time::sleep(delays.next()?).await;
            Some(((), delays))
        });
        tokio_runtime().block_on(runner.run(options).cancel_on(requests).into_future())
    }

    fn run_dropped_after(
        store: &Store,
        options: RunOptions,
        after: Duration,
    ) -> Option<Result<ProcessResult, RunError>> {
        let runner = agentrun_tokio::Runner::new(store.clone());
        tokio_runtime()
            .block_on(async { ::tokio::time::timeout(after, runner.run(options)).await })
            .ok()
    }
}

// ---------------------------------------------------------------------------------------------
// Helpers

/// How long a stopped run may take here. The children of these tests sleep 60 s, so a run
/// returning within this bound was stopped by the driver; when exactly is the run lifecycle's
/// business, tested on a virtual clock in core/tests/lifecycle.rs. Generous, so a loaded
/// machine cannot fail the suite.
const WIRING_BOUND: Duration = Duration::from_secs(30);

struct Env {
    tmp: tempfile::TempDir,
    store: Store,
}

impl Env {
    fn new() -> Self {
        let tmp = tempfile::tempdir().unwrap();
        let store = Store::open(tmp.path().join("store")).unwrap();
        Self { tmp, store }
    }

    fn path(&self, name: &str) -> PathBuf {
        self.tmp.path().join(name)
    }

    /// The entries of the store's runtime directory (allocated sinks not yet removed).
    fn runtime_entries(&self) -> Vec<PathBuf> {
        fs::read_dir(self.store.runtime_dir())
            .unwrap()
            .map(|e| e.unwrap().path())
            .collect()
    }

    fn bytes(&self, record: &ResultRecord, stream: &str) -> Vec<u8> {
        let stream = record.stream(stream).expect("the stream is declared");
        let uri: ArtifactUri = record.stream_uri(stream);
        let mut out = Vec::new();
        self.store.copy_to(&uri, &mut out).unwrap();
        out
    }

    fn stdout(&self, result: &ProcessResult) -> String {
        String::from_utf8(self.bytes(&result.record, "stdout")).unwrap()
    }
}

/// `sh -c SCRIPT`: the script is one argv element, run by the shell program itself.
fn sh(script: &str) -> RunOptions {
    RunOptions::new("sh").arg("-c").arg(script)
}

/// `sh -c SCRIPT` with an allocated result sink.
fn sh_sink(script: &str) -> RunOptions {
    sh(script).with_result_sink(ResultSink::Allocate)
}

fn code(result: &ProcessResult) -> Exit {
    result.exit.expect("the child exited")
}

/// Waits until `f` holds, up to `limit`.
fn eventually(limit: Duration, mut f: impl FnMut() -> bool) -> bool {
    let start = Instant::now();
    while start.elapsed() < limit {
        if f() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    f()
}

/// Peak resident memory of this test process, in bytes.
fn peak_rss() -> u64 {
    let status = fs::read_to_string("/proc/self/status").unwrap();
    let line = status.lines().find(|l| l.starts_with("VmHWM:")).unwrap();
    let kib: u64 = line.split_whitespace().nth(1).unwrap().parse().unwrap();
    kib * 1024
}

// ---------------------------------------------------------------------------------------------
// The clean result channel (docs/result-channel.md)

/// The seed's proving test: stdout is a flood of ANSI colour, tracing, a banner and a decoy
/// verdict; the answer in the sink holds `{ "verdict": "MERGE" }` and stray ANSI-looking
/// bytes. `result` is the answer byte for byte, with no stripping or parsing helper, and
/// stdout is retained in full.
fn proving_test<D: Driver>() {
    let env = Env::new();
    let mut noise = String::from("\x1b[1;36m=== AGENT v9.9 — startup banner ===\x1b[0m\n");
    for i in 0..400 {
        noise.push_str(&format!(
            "\x1b[2m2026-01-01T00:00:{:02}Z\x1b[0m \x1b[32mINFO\x1b[0m tracing span{{id={i}}}: \
             {{\"progress\": {i}}} working…\n",
            i % 60
        ));
    }
    noise.push_str("decoy: {\"verdict\": \"REJECT\"}\n```json\n{\"verdict\": \"REJECT\"}\n```\n");
    let answer =
        "Final answer:\n{ \"verdict\": \"MERGE\" }\n\x1b[31mnot colour, just bytes\x1b[0m } {\n";
    let script = r#"printf '%s' "$NOISE"; printf '%s' "$ANSWER" > "$AGENTRUN_RESULT_SINK""#;
    let result = D::run(
        &env.store,
        sh_sink(script).env("NOISE", &noise).env("ANSWER", answer),
    )
    .unwrap();
    assert_eq!(result.result.as_deref(), Some(answer));
    assert_eq!(
        result.sink,
        SinkOutcome::Read {
            bytes: answer.len() as u64
        }
    );
    assert_eq!(env.stdout(&result), noise, "stdout is retained in full");
    assert_eq!(result.answer(), answer);

    // Without opt-in: no result, the same stdout, and the variable is not in the child's
    // environment (the stale inherited case is `a_stale_inherited_variable_is_removed`).
    let script = r#"printf '%s' "$NOISE"; printf '%s' "${AGENTRUN_RESULT_SINK-unset}" >&2"#;
    let result = D::run(&env.store, sh(script).env("NOISE", &noise)).unwrap();
    assert_eq!(result.result, None);
    assert_eq!(result.sink, SinkOutcome::NotRequested);
    assert_eq!(env.stdout(&result), noise);
    assert_eq!(env.bytes(&result.record, "stderr"), b"unset");
}

/// The variable an ancestor exported is removed from the child's environment unless the
/// caller opts in. The test re-runs itself with the variable in its own environment.
fn a_stale_inherited_variable_is_removed<D: Driver>(test_name: &str) {
    const MARK: &str = "AGENTRUN_CONFORMANCE_STALE";
    if std::env::var_os(DEFAULT_SINK_VAR).is_none() {
        let name = test_name
            .split_once("::")
            .map_or(test_name, |(_, rest)| rest);
        let out = std::process::Command::new(std::env::current_exe().unwrap())
            .args([name, "--exact", "--nocapture", "--test-threads=1"])
            .env(DEFAULT_SINK_VAR, "/tmp/stale-ancestor-sink")
            .env(MARK, "1")
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "{text}{}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(text.contains("1 passed"), "the re-run ran the test: {text}");
        return;
    }
    assert!(std::env::var_os(MARK).is_some(), "run by the outer test");
    let env = Env::new();
    let probe = r#"printf '%s' "${AGENTRUN_RESULT_SINK-unset}""#;
    let result = D::run(&env.store, sh(probe)).unwrap();
    assert_eq!(env.stdout(&result), "unset");
    assert_eq!(result.result, None);
    // On opt-in the runner's own path replaces the stale one.
    let result = D::run(&env.store, sh_sink(probe)).unwrap();
    let seen = env.stdout(&result);
    assert!(
        seen.starts_with(&format!("{}/", env.store.runtime_dir().display())),
        "{seen}"
    );
}

fn a_caller_env_entry_for_the_sink_variable_is_rejected_before_spawn<D: Driver>() {
    let env = Env::new();
    let marker = env.path("spawned");
    let script = format!("touch '{}'", marker.display());
    for options in [
        sh(&script).env(DEFAULT_SINK_VAR, "/tmp/elsewhere"),
        sh_sink(&script).env(DEFAULT_SINK_VAR, "/tmp/elsewhere"),
        sh(&script)
            .sink_var("AMPLIHACK_RESULT_SINK")
            .env("AMPLIHACK_RESULT_SINK", "/tmp/x"),
    ] {
        let err = D::run(&env.store, options).unwrap_err();
        assert!(
            matches!(
                err,
                RunError::InvalidOptions(OptionsError::SinkVarInEnv { .. })
            ),
            "{err:?}"
        );
        assert!(err.to_string().contains("RESULT_SINK"), "{err}");
    }
    // A key that smuggles '=' (std would write "AGENTRUN_RESULT_SINK=/tmp/evil=x") or is empty
    // is no variable name at all.
    for key in ["AGENTRUN_RESULT_SINK=/tmp/evil", "", "A\0B"] {
        for options in [sh(&script).env(key, "x"), sh_sink(&script).env(key, "x")] {
            let err = D::run(&env.store, options).unwrap_err();
            assert!(
                matches!(
                    err,
                    RunError::InvalidOptions(OptionsError::InvalidEnvKey { .. })
                ),
                "{key:?}: {err:?}"
            );
        }
    }
    assert!(!marker.exists(), "nothing was spawned");
    assert!(env.store.records().unwrap().is_empty());
    assert!(env.runtime_entries().is_empty());
}

fn the_variable_name_is_configurable<D: Driver>() {
    let env = Env::new();
    let script =
        r#"printf '%s' "${AGENTRUN_RESULT_SINK-unset}"; printf 'amp' > "$AMPLIHACK_RESULT_SINK""#;
    let result = D::run(
        &env.store,
        sh_sink(script).sink_var("AMPLIHACK_RESULT_SINK"),
    )
    .unwrap();
    assert_eq!(result.result.as_deref(), Some("amp"));
    assert_eq!(env.stdout(&result), "unset");
}

/// The allocated sink lives in a fresh 0700 directory under the store's runtime directory,
/// unique per run, and is removed with its directory afterwards.
fn the_allocated_sink_is_private_unique_and_removed<D: Driver>() {
    let env = Env::new();
    let script = r#"d=$(dirname "$AGENTRUN_RESULT_SINK"); stat -c '%a %u' "$d"; printf '%s' "$AGENTRUN_RESULT_SINK"; test -e "$AGENTRUN_RESULT_SINK" && echo exists; printf x > "$AGENTRUN_RESULT_SINK""#;
    let a = D::run(&env.store, sh_sink(script)).unwrap();
    let b = D::run(&env.store, sh_sink(script)).unwrap();
    let (a, b) = (env.stdout(&a), env.stdout(&b));
    let uid = fs::metadata(env.tmp.path()).unwrap().uid();
    for out in [&a, &b] {
        let (stat, path) = out.split_once('\n').unwrap();
        assert_eq!(stat, format!("700 {uid}"));
        assert!(
            Path::new(path).starts_with(env.store.runtime_dir()),
            "{path}"
        );
        assert!(
            !out.contains("exists"),
            "the sink does not exist before the child writes it"
        );
        assert!(!Path::new(path).exists(), "removed after the run");
    }
    assert_ne!(a, b);
    assert!(
        env.runtime_entries().is_empty(),
        "{:?}",
        env.runtime_entries()
    );
}

fn a_caller_path_is_read_and_left_in_place<D: Driver>() {
    let env = Env::new();
    let path = env.path("my-sink");
    let result = D::run(
        &env.store,
        sh(r#"printf 'mine' > "$AGENTRUN_RESULT_SINK""#)
            .with_result_sink(ResultSink::Path(path.clone())),
    )
    .unwrap();
    assert_eq!(result.result.as_deref(), Some("mine"));
    assert_eq!(fs::read(&path).unwrap(), b"mine");
    // A second run at the same path is refused before it starts: the earlier answer is
    // neither returned as its answer nor deleted.
    let err = D::run(
        &env.store,
        sh("echo ran > ran").with_result_sink(ResultSink::Path(path.clone())),
    )
    .map(|_| ())
    .unwrap_err();
    assert!(err.to_string().contains("already exists"), "{err}");
    assert_eq!(fs::read(&path).unwrap(), b"mine");
}

/// Runs `script` with an allocated sink and checks the outcome and result; the sink and its
/// directory are gone afterwards whatever the child put there.
fn sink_case<D: Driver>(
    env: &Env,
    options: RunOptions,
    outcome: SinkOutcome,
    result: Option<&str>,
) {
    let started = Instant::now();
    let r = D::run(&env.store, options).unwrap();
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "the read does not hang"
    );
    assert_eq!(r.outcome, RunOutcome::Completed);
    assert_eq!(r.sink, outcome);
    assert_eq!(r.result.as_deref(), result);
    assert!(
        env.runtime_entries().is_empty(),
        "{:?}",
        env.runtime_entries()
    );
}

fn sink_cases_give_their_typed_outcome<D: Driver>() {
    let env = Env::new();
    let s = |script: &str| sh_sink(&format!("S=\"$AGENTRUN_RESULT_SINK\"; {script}"));
    sink_case::<D>(&env, s("true"), SinkOutcome::Unwritten, None);
    sink_case::<D>(&env, s("exit 3"), SinkOutcome::Unwritten, None);
    sink_case::<D>(&env, s(": > \"$S\""), SinkOutcome::Empty, None);
    sink_case::<D>(
        &env,
        s("printf ' \\n\\t \\n' > \"$S\""),
        SinkOutcome::Read { bytes: 5 },
        Some(" \n\t \n"),
    );
    sink_case::<D>(
        &env,
        s("printf 'a\\r\\nb\\r\\n' > \"$S\""),
        SinkOutcome::Read { bytes: 6 },
        Some("a\r\nb\r\n"),
    );
    // A non-zero exit is still a normal exit: the sink is read.
    sink_case::<D>(
        &env,
        s("printf 'failed but answered' > \"$S\"; exit 1"),
        SinkOutcome::Read { bytes: 19 },
        Some("failed but answered"),
    );
    // Sparse 64 GiB: reading it into memory would fail the test (time and memory).
    sink_case::<D>(
        &env,
        s("truncate -s 64G \"$S\""),
        SinkOutcome::Oversize {
            size: 64 << 30,
            cap: 16 << 20,
        },
        None,
    );
    sink_case::<D>(
        &env,
        s("printf '12345' > \"$S\"").sink_cap(4),
        SinkOutcome::Oversize { size: 5, cap: 4 },
        None,
    );
    sink_case::<D>(
        &env,
        s("printf '1234' > \"$S\"").sink_cap(4),
        SinkOutcome::Read { bytes: 4 },
        Some("1234"),
    );
    sink_case::<D>(
        &env,
        s("printf 'ok \\377\\376' > \"$S\""),
        SinkOutcome::NotUtf8 { bytes: 5 },
        None,
    );
    sink_case::<D>(
        &env,
        s("mkfifo \"$S\""),
        SinkOutcome::NotRegularFile {
            kind: FileKind::Fifo,
        },
        None,
    );
    sink_case::<D>(
        &env,
        s("mkdir -p \"$S/sub\""),
        SinkOutcome::NotRegularFile {
            kind: FileKind::Directory,
        },
        None,
    );
}

/// A symlink at the sink path is refused and the file it points to is never returned, also
/// when the link replaces a written answer after the child exited.
fn a_symlinked_sink_is_refused<D: Driver>() {
    let env = Env::new();
    let secret = env.path("secret");
    fs::write(&secret, "TOPSECRET").unwrap();
    let secret = secret.display().to_string();
    let linked = D::run(
        &env.store,
        sh_sink(r#"ln -s "$SECRET" "$AGENTRUN_RESULT_SINK""#).env("SECRET", &secret),
    )
    .unwrap();
    assert_eq!(linked.sink, SinkOutcome::Symlink);
    assert_eq!(linked.result, None);

    // The child writes an answer and exits; a grandchild holding stdout swaps the answer for
    // a link to the secret, then closes stdout. The runner reads after the exit and the end
    // of output, so it meets the link.
    let script = r#"S="$AGENTRUN_RESULT_SINK"; printf 'honest answer' > "$S";
        ( sleep 0.3; ln -s "$SECRET" "$S.swap"; mv -T "$S.swap" "$S"; echo swapped ) &
        exit 0"#;
    let swapped = D::run(&env.store, sh_sink(script).env("SECRET", &secret)).unwrap();
    assert_eq!(env.stdout(&swapped), "swapped\n");
    assert_eq!(swapped.sink, SinkOutcome::Symlink);
    assert_eq!(swapped.result, None);
    assert_eq!(fs::read_to_string(&secret).unwrap(), "TOPSECRET");
    assert!(
        env.runtime_entries().is_empty(),
        "the link was removed, not followed"
    );
}

/// 64 concurrent runs, each with its own sink, each get their own answer.
fn concurrent_runs_have_their_own_sinks<D: Driver>() {
    let env = Env::new();
    let all = (0..64)
        .map(|i| {
            sh_sink(r#"sleep 0.05; printf 'answer-%s' "$N" > "$AGENTRUN_RESULT_SINK"; echo "$N""#)
                .env("N", i.to_string())
        })
        .collect();
    let results = D::run_all(&env.store, all);
    assert_eq!(results.len(), 64);
    for (i, r) in results.into_iter().enumerate() {
        let r = r.unwrap();
        assert_eq!(r.result, Some(format!("answer-{i}")));
        assert_eq!(env.stdout(&r), format!("{i}\n"));
    }
    assert!(env.runtime_entries().is_empty());
}

// ---------------------------------------------------------------------------------------------
// Process control

fn exit_codes_and_signals<D: Driver>() {
    let env = Env::new();
    for c in [0, 1, 255] {
        let r = D::run(&env.store, sh(&format!("exit {c}"))).unwrap();
        assert_eq!(
            (r.outcome, code(&r)),
            (RunOutcome::Completed, Exit::Code(c))
        );
        assert_eq!(r.record.capture_status, CaptureStatus::Succeeded);
    }
    let r = D::run(&env.store, sh("echo dying; kill -KILL $$")).unwrap();
    assert_eq!(code(&r), Exit::Signal(9));
    assert_eq!(code(&r).shell_code(), 137);
    assert_eq!(env.stdout(&r), "dying\n");
    // The result names the process: its pid (what the child saw as $$) and the caller's label.
    let r = D::run(&env.store, sh("echo $$").label("worker-7")).unwrap();
    assert_eq!(r.label.as_deref(), Some("worker-7"));
    assert_eq!(r.pid.map(|p| format!("{p}\n")), Some(env.stdout(&r)));
    assert_eq!(D::run(&env.store, sh("true")).unwrap().label, None);
}

fn spawn_failures_are_clear_errors<D: Driver>() {
    let env = Env::new();
    let missing = "agentrun-no-such-program-xyz";
    let err = D::run(
        &env.store,
        RunOptions::new(missing).with_result_sink(ResultSink::Allocate),
    )
    .unwrap_err();
    assert!(
        matches!(&err, RunError::Spawn { source, .. } if source.kind() == std::io::ErrorKind::NotFound),
        "{err:?}"
    );
    assert!(err.to_string().contains(missing), "{err}");

    let script = env.path("not-executable.sh");
    fs::write(&script, "#!/bin/sh\necho hi\n").unwrap();
    fs::set_permissions(&script, fs::Permissions::from_mode(0o644)).unwrap();
    let err = D::run(&env.store, RunOptions::new(&script)).unwrap_err();
    assert!(
        matches!(&err, RunError::Spawn { source, .. } if source.kind() == std::io::ErrorKind::PermissionDenied),
        "{err:?}"
    );
    assert!(err.to_string().contains("not-executable.sh"), "{err}");
    assert!(err.to_string().contains("executable"), "{err}");

    let nowhere = env.path("no/such/dir");
    let err = D::run(&env.store, RunOptions::new("true").current_dir(&nowhere)).unwrap_err();
    assert!(matches!(err, RunError::WorkingDirectory { .. }), "{err:?}");
    assert!(
        err.to_string().contains(&nowhere.display().to_string()),
        "{err}"
    );

    // Nothing is left behind: no record, no capture, no sink directory.
    assert!(env.store.records().unwrap().is_empty());
    assert!(env.runtime_entries().is_empty());
    assert_eq!(
        fs::read_dir(env.store.root().join("captures"))
            .unwrap()
            .count(),
        0
    );
}

fn argv_is_never_a_shell_and_the_working_directory_applies<D: Driver>() {
    let env = Env::new();
    let args = ["a b", "$HOME", "*", "; echo injected", "'\""];
    let r = D::run(
        &env.store,
        RunOptions::new("printf").arg("%s\\n").args(args),
    )
    .unwrap();
    assert_eq!(env.stdout(&r), args.map(|a| format!("{a}\n")).concat());
    let dir = env.path("wd");
    fs::create_dir(&dir).unwrap();
    let r = D::run(&env.store, RunOptions::new("pwd").current_dir(&dir)).unwrap();
    assert_eq!(env.stdout(&r), format!("{}\n", dir.display()));
    let r = D::run(
        &env.store,
        sh(r#"printf '%s|%s' "$SET" "${GONE-unset}""#)
            .env("SET", "yes")
            .env("GONE", "x")
            .env_remove("GONE"),
    )
    .unwrap();
    assert_eq!(env.stdout(&r), "yes|unset");
}

fn the_child_runs_in_its_own_process_group<D: Driver>() {
    let env = Env::new();
    let r = D::run(&env.store, sh("echo $$; cut -d' ' -f5 /proc/$$/stat")).unwrap();
    let out = env.stdout(&r);
    let (pid, pgid) = out.trim().split_once('\n').unwrap();
    assert_eq!(pid, pgid, "the child leads its own group");
    let ours = fs::read_to_string("/proc/self/stat").unwrap();
    let ours = ours
        .rsplit_once(')')
        .unwrap()
        .1
        .split_whitespace()
        .nth(2)
        .unwrap()
        .to_owned();
    assert_ne!(pgid, ours, "not the runner's group");
}

fn stdin_null_bytes_and_inherit<D: Driver>() {
    let env = Env::new();
    let r = D::run(&env.store, RunOptions::new("cat")).unwrap();
    assert_eq!(env.stdout(&r), "", "stdin is null by default");
    // The child writes 8 MiB before it reads its 8 MiB of input: the input is written while
    // stdout is drained, so neither side blocks the other.
    let input: Vec<u8> = (0..8u32 << 20).map(|i| (i % 251) as u8).collect();
    let r = D::run(
        &env.store,
        sh("head -c 8388608 /dev/zero; exec cat").stdin(StdinMode::Bytes(input.clone())),
    )
    .unwrap();
    let out = env.bytes(&r.record, "stdout");
    assert_eq!(out.len(), 16 << 20);
    assert!(out[..8 << 20].iter().all(|&b| b == 0));
    assert_eq!(&out[8 << 20..], &input[..]);
    // A child that exits without reading its input is not an error.
    let r = D::run(
        &env.store,
        RunOptions::new("true").stdin(StdinMode::Bytes(input)),
    )
    .unwrap();
    assert_eq!(code(&r), Exit::Code(0));
    // Inherited stdin: fine from a pipe or a file; refused from a terminal (the child, in a
    // group of its own, would be stopped by its first read), e.g. `cargo test` in a shell.
    let r = D::run(
        &env.store,
        RunOptions::new("true").stdin(StdinMode::Inherit),
    );
    if std::io::IsTerminal::is_terminal(&std::io::stdin()) {
        assert!(matches!(r, Err(RunError::StdinIsTerminal)), "{r:?}");
    } else {
        assert_eq!(code(&r.unwrap()), Exit::Code(0));
    }
}

/// A child whose grandchild keeps the pipes open, both ignoring SIGTERM, is stopped on
/// timeout (SIGKILL to the group after the grace): the call returns long before their own
/// sleeps end (the exact escalation times are the run lifecycle's, tested in the core), the
/// output captured before is finalized as incomplete and readable, and the sink is not read.
fn a_timeout_stops_the_whole_group<D: Driver>() {
    let env = Env::new();
    let pids = env.path("pids");
    let script = format!(
        r#"trap '' TERM; printf 'written' > "$AGENTRUN_RESULT_SINK"; echo started;
        (trap '' TERM; sleep 60) & echo $! > '{p}'; echo $$ >> '{p}'; sleep 60"#,
        p = pids.display()
    );
    let (timeout, grace) = (Duration::from_millis(500), Duration::from_millis(500));
    let started = Instant::now();
    let r = D::run(
        &env.store,
        sh_sink(&script).timeout(timeout).kill_grace(grace),
    )
    .unwrap();
    let took = started.elapsed();
    assert!(took < WIRING_BOUND, "returned after {took:?}");
    assert_eq!(r.outcome, RunOutcome::TimedOut);
    assert_eq!(r.exit, Some(Exit::Signal(9)));
    assert_eq!(
        r.sink,
        SinkOutcome::NotRead {
            reason: NotReadReason::TimedOut
        }
    );
    assert_eq!(r.result, None);
    assert!(r.record.incomplete);
    assert_eq!(r.record.capture_status, CaptureStatus::Cancelled);
    assert_eq!(env.stdout(&r), "started\n");
    assert_eq!(env.store.record(&r.record.run_id).unwrap(), r.record);
    for pid in fs::read_to_string(&pids).unwrap().split_whitespace() {
        let pid: i32 = pid.parse().unwrap();
        assert!(
            eventually(Duration::from_secs(5), || ended(pid)),
            "{pid} was stopped"
        );
    }
    assert!(env.runtime_entries().is_empty());
}

/// A grandchild that left the group (`setsid`) and keeps the pipes open cannot be killed with
/// the group; the run still returns long before it lets the pipes go, with what was captured.
fn a_grandchild_outside_the_group_does_not_hang_the_run<D: Driver>() {
    let env = Env::new();
    let script = "setsid sleep 60 & echo started; sleep 60";
    let (timeout, grace) = (Duration::from_millis(500), Duration::from_millis(200));
    let started = Instant::now();
    let r = D::run(&env.store, sh(script).timeout(timeout).kill_grace(grace)).unwrap();
    let took = started.elapsed();
    assert!(took < WIRING_BOUND, "returned after {took:?}");
    assert_eq!(r.outcome, RunOutcome::TimedOut);
    assert_eq!(env.stdout(&r), "started\n");
}

/// A child that stops producing output is stopped after the idle timeout; one that keeps
/// talking is not, even when it runs longer than the idle timeout.
fn the_idle_timeout_counts_from_the_last_output<D: Driver>() {
    let env = Env::new();
    let idle = Duration::from_secs(1);
    let chatty = "for i in 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15; do echo tick; sleep 0.1; done; echo tock >&2";
    let started = Instant::now();
    let r = D::run(&env.store, sh(chatty).idle_timeout(idle)).unwrap();
    assert_eq!(r.outcome, RunOutcome::Completed);
    assert!(started.elapsed() > idle);
    let quiet = "for i in 1 2 3; do echo tick; sleep 0.1; done; sleep 60";
    let started = Instant::now();
    let r = D::run(
        &env.store,
        sh_sink(quiet)
            .idle_timeout(idle)
            .kill_grace(Duration::from_secs(2)),
    )
    .unwrap();
    assert!(started.elapsed() < WIRING_BOUND, "{:?}", started.elapsed());
    assert_eq!(r.outcome, RunOutcome::IdleTimedOut);
    assert_eq!(r.exit, Some(Exit::Signal(15)));
    assert_eq!(
        r.sink,
        SinkOutcome::NotRead {
            reason: NotReadReason::IdleTimedOut
        }
    );
    assert!(r.record.incomplete);
    assert_eq!(env.stdout(&r), "tick\ntick\ntick\n");
}

/// Dropping the run future stops the group; the output captured so far is finalized as
/// cancelled and stays readable; an allocated sink is removed.
fn dropping_the_future_cancels_the_run<D: Driver>() {
    let env = Env::new();
    let pidfile = env.path("pid");
    let script = format!(
        r#"echo $$ > '{}'; printf 'x' > "$AGENTRUN_RESULT_SINK"; echo before-cancel; sleep 60"#,
        pidfile.display()
    );
    let dropped = D::run_dropped_after(
        &env.store,
        sh_sink(&script).kill_grace(Duration::from_millis(500)),
        Duration::from_secs(1),
    );
    assert!(dropped.is_none(), "the future was dropped before the end");
    let pid: i32 = fs::read_to_string(&pidfile)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert!(
        eventually(Duration::from_secs(5), || ended(pid)),
        "the child was stopped"
    );
    assert!(
        eventually(Duration::from_secs(5), || env
            .store
            .records()
            .unwrap()
            .len()
            == 1),
        "the cancelled run has a record"
    );
    let id = &env.store.records().unwrap()[0];
    let record = env.store.record(id).unwrap();
    assert!(record.incomplete);
    assert_eq!(record.capture_status, CaptureStatus::Cancelled);
    assert_eq!(env.bytes(&record, "stdout"), b"before-cancel\n");
    assert!(eventually(Duration::from_secs(5), || env
        .runtime_entries()
        .is_empty()));
}

/// A child that exits but leaves a background process holding its pipes: the run completes
/// with the child's exit status and its answer shortly after, neither hanging nor reported as
/// a timeout, and the leftover process is stopped.
fn leftovers_holding_the_pipes_do_not_hold_the_run<D: Driver>() {
    let env = Env::new();
    let pidfile = env.path("bg");
    let script = format!(
        r#"printf ok > "$AGENTRUN_RESULT_SINK"; sleep 60 & echo $! > '{}'; echo leader-done"#,
        pidfile.display()
    );
    let started = Instant::now();
    let r = D::run(
        &env.store,
        sh_sink(&script).kill_grace(Duration::from_millis(500)),
    )
    .unwrap();
    let took = started.elapsed();
    assert!(took < WIRING_BOUND, "took {took:?}");
    assert_eq!(r.outcome, RunOutcome::Completed);
    assert_eq!(code(&r), Exit::Code(0));
    assert_eq!(r.result.as_deref(), Some("ok"));
    assert_eq!(env.stdout(&r), "leader-done\n");
    let bg: i32 = fs::read_to_string(&pidfile)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert!(
        eventually(Duration::from_secs(5), || ended(bg)),
        "the leftover process was stopped"
    );
}

/// The grace belongs to the whole group: the child (`sh -c '…; echo after'`, a wrapper as
/// `npm test` is) dies of SIGTERM at once, and the shell it runs, which traps SIGTERM to clean
/// up (a 1 s sleep, then a marker file), still gets to finish its cleanup instead of being
/// SIGKILLed with the child's exit. The run ends once the group is empty, long before the
/// (long) grace, with the child's own status.
fn the_rest_of_the_group_gets_the_grace_after_the_child_dies<D: Driver>() {
    let env = Env::new();
    let (options, marker, ready) = wrapped_trap(&env);
    let started = Instant::now();
    let r = D::run_stopped_when(&env.store, options, ready).unwrap();
    assert!(started.elapsed() < WIRING_BOUND, "{:?}", started.elapsed());
    assert_eq!(r.outcome, RunOutcome::Cancelled);
    assert_eq!(r.exit, Some(Exit::Signal(15)), "the child's own ending");
    assert_eq!(
        fs::read_to_string(&marker).ok().as_deref(),
        Some("cleaned\n"),
        "the trap finished its cleanup before the run returned"
    );
    assert_eq!(env.stdout(&r), "", "the child itself died of SIGTERM");
}

/// `sh -c 'sh trap.sh …; echo after'` with a long grace: the inner shell traps SIGTERM, and
/// its trap sleeps 1 s, then writes "cleaned" to the marker file. It creates the ready file
/// once the trap is set. Returns the options, the marker and the ready file.
fn wrapped_trap(env: &Env) -> (RunOptions, PathBuf, PathBuf) {
    let (inner, marker, ready) = (env.path("trap.sh"), env.path("cleaned"), env.path("ready"));
    fs::write(
        &inner,
        "trap 'sleep 1; echo cleaned > \"$1\"; exit 0' TERM\n\
         : > \"$2\"\n\
         while :; do sleep 1; done\n",
    )
    .unwrap();
    let options = RunOptions::new("sh")
        .arg("-c")
        .arg(r#"sh "$0" "$1" "$2"; echo after"#)
        .arg(&inner)
        .arg(&marker)
        .arg(&ready)
        .kill_grace(Duration::from_secs(300));
    (options, marker, ready)
}

/// The same for a dropped run future: the blocking job that finishes the run leaves the rest
/// of the group its grace, and publishes the record once the group is empty, long before the
/// grace would end.
fn a_dropped_run_leaves_the_rest_of_the_group_its_grace<D: Driver>() {
    let env = Env::new();
    let (options, marker, ready) = wrapped_trap(&env);
    D::run_dropped_when(&env.store, options, ready);
    assert!(
        eventually(WIRING_BOUND, || env.store.records().unwrap().len() == 1),
        "the dropped run was finished before its grace ended"
    );
    assert_eq!(
        fs::read_to_string(&marker).ok().as_deref(),
        Some("cleaned\n"),
        "the trap finished its cleanup before the run was finished"
    );
    let record = env.store.record(&env.store.records().unwrap()[0]).unwrap();
    assert_eq!(record.capture_status, CaptureStatus::Cancelled);
}

/// What the child leaves running in its group when it exits (here a `sleep` with every
/// standard stream redirected, so it holds no pipe of the run) is stopped at the end of the
/// run: gone soon after the run returned, which it does long before the (long) grace, since
/// the group turns empty on SIGTERM. The run is completed with the child's own exit status.
fn a_background_process_is_stopped_at_the_end_of_the_run<D: Driver>() {
    let env = Env::new();
    let pidfile = env.path("bg");
    let script = format!(
        "sleep 300 >/dev/null 2>&1 </dev/null & echo $! > '{}'; echo done; exit 3",
        pidfile.display()
    );
    let started = Instant::now();
    let r = D::run(&env.store, sh(&script).kill_grace(Duration::from_secs(300))).unwrap();
    assert!(started.elapsed() < WIRING_BOUND, "{:?}", started.elapsed());
    assert_eq!(r.outcome, RunOutcome::Completed);
    assert_eq!(r.exit, Some(Exit::Code(3)));
    assert!(!r.record.incomplete, "{:?}", r.record);
    assert_eq!(env.stdout(&r), "done\n");
    let bg: i32 = fs::read_to_string(&pidfile)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert!(
        eventually(WIRING_BOUND, || ended(bg)),
        "the background process {bg} was stopped"
    );
}

/// A group left holding only a zombie (here: a `sleep 0.1` whose parent left the group with
/// `setsid` and never reaps it; the same happens to every orphan where the reaper of orphans
/// does not reap, as when the runner is a container's first process) counts as empty: the
/// run does not sit out the (long) grace for a process that can no longer clean up anything.
fn a_group_of_zombies_does_not_cost_the_grace<D: Driver>() {
    let env = Env::new();
    let pidfile = env.path("parent");
    let script = format!(
        "(sleep 0.1 & exec setsid sleep 300) >/dev/null 2>&1 </dev/null & \
         echo $! > '{}'; sleep 0.5; echo done",
        pidfile.display()
    );
    let started = Instant::now();
    let r = D::run(&env.store, sh(&script).kill_grace(Duration::from_secs(300)));
    let took = started.elapsed();
    let parent = fs::read_to_string(&pidfile).unwrap();
    let _ = std::process::Command::new("kill")
        .args(["-KILL", parent.trim()])
        .status();
    let r = r.unwrap();
    assert!(took < WIRING_BOUND, "{took:?}");
    assert_eq!(r.outcome, RunOutcome::Completed);
    assert_eq!(r.exit, Some(Exit::Code(0)));
    assert_eq!(env.stdout(&r), "done\n");
}

/// A leader whose main thread called `pthread_exit`: `/proc` shows the process as a zombie
/// while its other thread still runs. It ignores SIGTERM, so it must get SIGKILL when the
/// grace ends; its worker thread (which appends to a file every 50 ms) is gone after the run.
/// Built with `cc` into the test's directory; skipped without a C compiler.
fn a_live_thread_behind_a_zombie_leader_gets_sigkill<D: Driver>() {
    let env = Env::new();
    let source = env.path("leader.c");
    let program = env.path("leader");
    fs::write(
        &source,
        r#"#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <unistd.h>
static const char *path;
static void *work(void *arg) {
    (void)arg;
    for (;;) {
        int fd = open(path, O_WRONLY | O_APPEND | O_CREAT, 0600);
        if (fd >= 0) { (void)write(fd, "x", 1); close(fd); }
        usleep(50000);
    }
    return 0;
}
int main(int argc, char **argv) {
    pthread_t worker;
    if (argc < 2) return 2;
    path = argv[1];
    signal(SIGTERM, SIG_IGN);
    if (pthread_create(&worker, 0, work, 0) != 0) return 3;
    pthread_exit(0);
}
"#,
    )
    .unwrap();
    match std::process::Command::new("cc")
        .arg("-pthread")
        .arg("-o")
        .arg(&program)
        .arg(&source)
        .status()
    {
        Ok(status) if status.success() => {}
        other => {
            eprintln!("skipped: no working C compiler (`cc`): {other:?}");
            return;
        }
    }
    let appended = env.path("appended");
    let pidfile = env.path("leader.pid");
    let script = format!(
        // The worker's first write proves the leader already ignores SIGTERM (it does so
        // before starting the thread): no fixed delay for the end-of-run stop to race.
        "'{}' '{}' >/dev/null 2>&1 </dev/null & echo $! > '{}'; \
         i=0; while [ ! -s '{}' ] && [ $i -lt 1200 ]; do sleep 0.05; i=$((i+1)); done; exit 0",
        program.display(),
        appended.display(),
        pidfile.display(),
        appended.display()
    );
    let r = D::run(&env.store, sh(&script).kill_grace(Duration::from_secs(2)));
    let leader: i32 = fs::read_to_string(&pidfile)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    // The worker ran (so the leader was a zombie with a live thread), then every thread of
    // the process ended: the process is gone, or only its zombie leader is left.
    let worker_ran = eventually(WIRING_BOUND, || appended.exists());
    let threads_ended = eventually(WIRING_BOUND, || {
        fs::read_to_string(format!("/proc/{leader}/status")).map_or(true, |status| {
            status
                .lines()
                .any(|l| l.split_whitespace().eq(["Threads:", "1"]))
        })
    });
    // Cleaned up before asserting, so a failure leaves nothing behind.
    let _ = std::process::Command::new("kill")
        .args(["-KILL", &leader.to_string()])
        .status();
    let r = r.unwrap();
    assert!(worker_ran, "the worker thread started");
    assert!(threads_ended, "the worker thread of {leader} was killed");
    assert_eq!(r.outcome, RunOutcome::Completed);
    assert_eq!(r.exit, Some(Exit::Code(0)));
}

/// `RunOptions::keep_background`: the background process outlives the run (a daemon started
/// on purpose), and the run is completed as usual.
fn keep_background_keeps_what_the_child_left_running<D: Driver>() {
    let env = Env::new();
    let pidfile = env.path("bg");
    let script = format!(
        "sleep 300 >/dev/null 2>&1 </dev/null & echo $! > '{}'; exit 0",
        pidfile.display()
    );
    let r = D::run(&env.store, sh(&script).keep_background(true)).unwrap();
    assert_eq!(r.outcome, RunOutcome::Completed);
    assert_eq!(r.exit, Some(Exit::Code(0)));
    assert!(!r.record.incomplete, "{:?}", r.record);
    let bg: i32 = fs::read_to_string(&pidfile)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    let alive = !ended(bg);
    // Cleaned up before asserting, so a failure leaves nothing behind.
    let _ = std::process::Command::new("kill")
        .args(["-KILL", &bg.to_string()])
        .status();
    assert!(alive, "the background process {bg} was kept");
}

/// A child that exits normally while a process that escaped its group (`setsid`) holds the
/// pipes: the stop signals find the group empty, so the run does not sit out the (long) grace
/// period; it completes with the child's exit status.
fn an_escaped_pipe_holder_does_not_cost_the_grace<D: Driver>() {
    let env = Env::new();
    let script = "setsid sleep 60 & echo leader-done; exit 3";
    let started = Instant::now();
    let r = D::run(&env.store, sh(script).kill_grace(Duration::from_secs(60))).unwrap();
    assert!(started.elapsed() < WIRING_BOUND, "{:?}", started.elapsed());
    assert_eq!(r.outcome, RunOutcome::Completed);
    assert_eq!(r.exit, Some(Exit::Code(3)));
    assert_eq!(env.stdout(&r), "leader-done\n");
}

/// A process that escaped the group (`setsid`) keeps stdout open and writes to it after the
/// run ended: the run still completes with the child's exit, but the record does not pass for
/// complete: stdout carries a capture fault saying output may be missing and why, and only
/// what came before the end is retained.
fn late_output_of_an_escaped_pipe_holder_marks_the_capture_incomplete<D: Driver>() {
    let env = Env::new();
    let pidfile = env.path("holder");
    let script = format!(
        r#"setsid sh -c 'echo $$ > "$1"; sleep 30; echo late' holder '{}' & echo early"#,
        pidfile.display()
    );
    let started = Instant::now();
    let r = D::run(&env.store, sh(&script)).unwrap();
    assert!(started.elapsed() < WIRING_BOUND, "{:?}", started.elapsed());
    assert_eq!(r.outcome, RunOutcome::Completed);
    assert_eq!(r.exit, Some(Exit::Code(0)));
    assert_eq!(r.record.capture_status, CaptureStatus::Succeeded);
    assert!(r.record.incomplete, "{:?}", r.record);
    let faults: Vec<_> = r
        .record
        .faults
        .iter()
        .map(|f| (f.stream.as_ref().map(|s| s.as_str()), f.message.as_str()))
        .collect();
    // The holder inherited both pipes.
    let streams: Vec<_> = faults.iter().map(|(stream, _)| *stream).collect();
    assert_eq!(streams, [Some("stdout"), Some("stderr")], "{faults:?}");
    for (_, message) in &faults {
        assert!(
            message.starts_with("output may be missing")
                && message.contains("outside the run's process group"),
            "{faults:?}"
        );
    }
    assert!(
        r.model_text().starts_with("[Incomplete output"),
        "{}",
        r.model_text()
    );
    assert_eq!(env.stdout(&r), "early\n");
    assert_eq!(env.store.record(&r.record.run_id).unwrap(), r.record);
    let holder: i32 = fs::read_to_string(&pidfile)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    // It would write to a closed pipe and die of SIGPIPE; no need to wait 30 s for that. It
    // leads a group of its own (setsid): the group takes its `sleep` along.
    let _ = std::process::Command::new("kill")
        .args(["-KILL", "--", &format!("-{holder}")])
        .status();
}

/// The child swaps its sink directory for a file, which the runner cannot remove as a
/// directory: the run's result is intact, and the failure is reported with it instead of
/// being dropped.
fn a_sink_directory_that_cannot_be_removed_is_reported_with_the_result<D: Driver>() {
    let env = Env::new();
    let script =
        r#"d=$(dirname "$AGENTRUN_RESULT_SINK"); mv "$d" "$d.moved"; printf x > "$d"; echo done"#;
    let r = D::run(&env.store, sh_sink(script)).unwrap();
    assert_eq!(r.outcome, RunOutcome::Completed);
    assert_eq!(env.stdout(&r), "done\n");
    let error = r.sink_cleanup_error.as_deref().expect("the removal failed");
    assert!(error.contains("result-sink directory"), "{error}");
    // The result JSON carries it too.
    let json = serde_json::to_value(&r).unwrap();
    assert_eq!(json["sink_cleanup_error"], error);
    // A run whose sink is removed reports nothing.
    let r = D::run(&env.store, sh_sink("echo fine")).unwrap();
    assert_eq!(r.sink_cleanup_error, None);
    assert!(
        serde_json::to_value(&r)
            .unwrap()
            .get("sink_cleanup_error")
            .is_none()
    );
}

/// When the runner itself is SIGKILLed (no chance to clean up), its watchdog stops the
/// child's whole group: the child and a grandchild in its group end, long before their own
/// sleeps would. The runner is this test binary, re-run with a marker variable; it captures
/// into a store in this test's temporary directory, where the killed run leaves its
/// unfinished capture directory (and no record): GC removes it, since no live process holds
/// its lock any more.
fn the_group_is_stopped_when_the_runner_is_killed<D: Driver>(test_name: &str) {
    every_group_is_stopped_when_the_runner_is_killed::<D>(test_name, 1);
}

/// With several runs in flight when the runner is SIGKILLed, every one of their groups is
/// stopped, each with its own stop signals and grace: the second run's child and grandchild
/// ignore SIGTERM and end only by the SIGKILL after their grace.
fn every_group_in_flight_is_stopped_when_the_runner_is_killed<D: Driver>(test_name: &str) {
    every_group_is_stopped_when_the_runner_is_killed::<D>(test_name, 3);
}

/// How long the runner-death tests wait for each step: the runner's children to be guarded,
/// the watchdog to stop them. Far longer than either takes on a loaded machine, and far
/// shorter than the children's own sleeps (`RUNNER_DEATH_SLEEP`), so a child that ends within
/// it was stopped.
const RUNNER_DEATH_BOUND: Duration = Duration::from_secs(120);
const RUNNER_DEATH_SLEEP: &str = "600";

/// The runner (re-run as `test_name`) starts `runs` runs at once. Each child writes its own
/// and its grandchild's pids to a file of its own, then says `ready` on stdout; the runner's
/// live tap, which only runs once the run is set up (its watchdog told the group), marks the
/// run ready. The runner is killed once every run is ready, so the test never depends on how
/// fast a loaded machine schedules the runner between the spawn and the watchdog's guard.
fn every_group_is_stopped_when_the_runner_is_killed<D: Driver>(test_name: &str, runs: usize) {
    const PIDS: &str = "AGENTRUN_CONFORMANCE_RUNNER_PIDS";
    let pid_file = |base: &Path, run: usize| base.with_file_name(format!("pids.{run}"));
    let ready_file = |base: &Path, run: usize| base.with_file_name(format!("ready.{run}"));
    if let Some(pids) = std::env::var_os(PIDS) {
        // The runner: runs that would last ten minutes, killed from outside. Its store is the
        // outer test's, beside the pid files, so the outer test cleans up after it.
        let pids = PathBuf::from(pids);
        let store = Store::open(pids.with_file_name("store")).unwrap();
        std::thread::scope(|scope| {
            for run in 0..runs {
                let (p, ready) = (pid_file(&pids, run), ready_file(&pids, run));
                let ignore = if run == 1 { "trap '' TERM; " } else { "" };
                let script = format!(
                    "{ignore}sleep {s} & echo $! > '{p}.tmp'; echo $$ >> '{p}.tmp'; \
                     mv '{p}.tmp' '{p}'; echo ready; sleep {s}",
                    p = p.display(),
                    s = RUNNER_DEATH_SLEEP,
                );
                let options = sh(&script).kill_grace(Duration::from_secs(1));
                let store = &store;
                scope.spawn(move || {
                    let mut seen = Vec::new();
                    let observer = move |chunk: &[u8]| {
                        seen.extend_from_slice(chunk);
                        if seen.ends_with(b"ready\n") {
                            fs::write(&ready, b"").unwrap();
                        }
                    };
                    let _ = D::run_observed(store, options, Tap::Stdout, observer);
                });
            }
        });
        return;
    }
    let env = Env::new();
    let pids = env.path("pids");
    let name = test_name
        .split_once("::")
        .map_or(test_name, |(_, rest)| rest);
    let mut runner = std::process::Command::new(std::env::current_exe().unwrap())
        .args([name, "--exact", "--nocapture", "--test-threads=1"])
        .env(PIDS, &pids)
        .stdout(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let all_ready = eventually(RUNNER_DEATH_BOUND, || {
        (0..runs).all(|run| ready_file(&pids, run).exists())
    });
    runner.kill().unwrap(); // SIGKILL
    runner.wait().unwrap();
    assert!(all_ready, "the runner started and guarded its children");
    for run in 0..runs {
        let written = fs::read_to_string(pid_file(&pids, run)).unwrap();
        for pid in written.split_whitespace() {
            let pid: i32 = pid.parse().unwrap();
            assert!(
                eventually(RUNNER_DEATH_BOUND, || ended(pid)),
                "{pid} of run {run} was stopped after the runner died"
            );
        }
    }
    // The killed runs never finished: their capture directories are left, without a record.
    let captures = env.path("store/captures");
    let left = || fs::read_dir(&captures).unwrap().count();
    assert_eq!(left(), runs, "each killed run left its capture directory");
    assert!(env.store.records().unwrap().is_empty());
    let report = env.store.gc(&agentrun_fs::GcOptions::default()).unwrap();
    assert_eq!(report.captures_removed, runs as u64, "{report:?}");
    assert_eq!(left(), 0, "GC removed the abandoned captures");
}

/// A second stop request while the child ignores SIGTERM sends SIGKILL at once, without
/// waiting for the (long) grace period.
fn a_second_stop_request_kills_at_once<D: Driver>() {
    let env = Env::new();
    let script = "trap '' TERM; echo waiting; sleep 60";
    let grace = Duration::from_secs(60);
    let started = Instant::now();
    let r = D::run_with_stop_requests(
        &env.store,
        sh(script).kill_grace(grace),
        vec![Duration::from_millis(500), Duration::from_millis(500)],
    )
    .unwrap();
    assert!(started.elapsed() < WIRING_BOUND, "{:?}", started.elapsed());
    assert_eq!(r.outcome, RunOutcome::Cancelled);
    assert_eq!(r.exit, Some(Exit::Signal(9)));
    assert_eq!(env.stdout(&r), "waiting\n");
}

/// A stop future (a signal, in the CLI) stops the group like a timeout and the run still
/// returns its result: cancelled, the output so far retained, the sink not read.
fn a_stop_future_cancels_the_run_and_returns_its_result<D: Driver>() {
    let env = Env::new();
    let pidfile = env.path("pid");
    let script = format!(
        r#"echo $$ > '{}'; printf 'x' > "$AGENTRUN_RESULT_SINK"; echo before-stop; sleep 60"#,
        pidfile.display()
    );
    let started = Instant::now();
    let r = D::run_stopped_after(
        &env.store,
        sh_sink(&script).kill_grace(Duration::from_millis(500)),
        Duration::from_secs(1),
    )
    .unwrap();
    assert!(started.elapsed() < WIRING_BOUND, "{:?}", started.elapsed());
    assert_eq!(r.outcome, RunOutcome::Cancelled);
    assert_eq!(
        r.sink,
        SinkOutcome::NotRead {
            reason: NotReadReason::Cancelled
        }
    );
    assert_eq!(r.result, None);
    assert!(r.record.incomplete);
    assert_eq!(r.record.capture_status, CaptureStatus::Cancelled);
    assert_eq!(env.stdout(&r), "before-stop\n");
    let pid: i32 = fs::read_to_string(&pidfile)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert!(
        ended(pid),
        "the child was stopped before the result came back"
    );
    assert!(env.runtime_entries().is_empty());
}

/// `size` bytes on stdout and `size` bytes on stderr at once: both streams intact (digests match
/// the generator's), memory bounded well below one stream's size (a buffered stream alone would
/// exceed the bound). CI floods 256 MiB per stream (1 GiB of store per run of the suite on both
/// drivers); the 1 GiB flood is the ignored `a_gigabyte_on_each_stream_is_captured_intact`
/// (`cargo test -p agentrun-tests --test conformance -- --ignored`), which needs 4 GiB of free
/// space in the temporary directory.
fn a_flood_on_each_stream_is_captured_intact<D: Driver>(size: u64) {
    // Peak RSS is the process's: measured where no other test runs beside the flood (see
    // `in_a_process_of_its_own`), unless run alone on purpose.
    let env = Env::new();
    let agent = env!("CARGO_BIN_EXE_fake_agent");
    let expected = std::process::Command::new(agent)
        .args(["digests", &size.to_string()])
        .output()
        .unwrap();
    let expected = String::from_utf8(expected.stdout).unwrap();
    let expected: Vec<&str> = expected.lines().collect();
    let r = D::run(
        &env.store,
        RunOptions::new(agent).args(["flood", &size.to_string()]),
    )
    .unwrap();
    assert_eq!(code(&r), Exit::Code(0));
    assert!(
        !r.record.incomplete,
        "capture incomplete (is the temporary directory full?): {:?}",
        r.record.faults
    );
    let (out, err) = (r.stdout().unwrap(), r.stderr().unwrap());
    assert_eq!((out.bytes, err.bytes), (size, size));
    assert_eq!(out.sha256.to_hex(), expected[0]);
    assert_eq!(err.sha256.to_hex(), expected[1]);
    let bound = (size / 4 * 3).min(512 << 20);
    let peak = peak_rss();
    assert!(
        peak < bound,
        "peak RSS {} MiB, bound {} MiB",
        peak >> 20,
        bound >> 20
    );
}

/// Runs the ignored test `name` (`smol::…`) of this test binary in a child process of its
/// own, so that what it measures of its process (peak RSS) is its own and not that of the
/// tests running beside it, and fails with the child's output when the child fails.
fn in_a_process_of_its_own(name: &str) {
    let exe = std::env::current_exe().unwrap();
    let out = std::process::Command::new(exe)
        .args([
            "--exact",
            name,
            "--ignored",
            "--nocapture",
            "--test-threads=1",
        ])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{name} failed in its own process:\n{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // An exact name that matches nothing runs nothing and still succeeds.
    assert!(stdout.contains("1 passed"), "{name} did not run:\n{stdout}");
}

// ---------------------------------------------------------------------------------------------

/// Instantiates every scenario for one driver.
/// A slow live tap holds its pump back past both drain periods after the child exited (the
/// child's last bytes still wait in the pipe): the run waits for them instead of dropping them.
/// Backpressure delays the end; it never loses output or passes for an escaped pipe holder.
fn a_slow_tap_delays_the_end_and_loses_nothing<D: Driver>() {
    let env = Env::new();
    let hold = agentrun_core::lifecycle::DRAIN_AFTER_EXIT
        + agentrun_core::lifecycle::DRAIN_AFTER_KILL
        + Duration::from_secs(1);
    let mut first = true;
    let result = D::run_observed(
        &env.store,
        RunOptions::new("seq").args(["1", "150000"]),
        Tap::Stdout,
        move |_chunk| {
            if std::mem::take(&mut first) {
                std::thread::sleep(hold);
            }
        },
    )
    .unwrap();
    assert_eq!(code(&result), Exit::Code(0));
    assert!(
        result.record.faults.is_empty() && !result.record.incomplete,
        "{:?}",
        result.record.faults
    );
    let expected: Vec<u8> = (1..=150_000)
        .flat_map(|i| format!("{i}\n").into_bytes())
        .collect();
    assert_eq!(env.bytes(&result.record, "stdout"), expected);
}

/// A live tap that panics neither hangs the run, nor leaks its child, nor loses what was
/// captured: its panic counts as a stop request, the child is stopped and reaped, the record is
/// published (cancelled, with a fault on the tapped stream) holding the chunk the tap panicked
/// on, and then the panic reaches the caller. The child says its pid, then runs `then` (a
/// minute's sleep, or a flood on the pipe the tap no longer drains).
fn a_panicking_tap_stops_the_run_and_keeps_what_was_captured<D: Driver + 'static>(
    pipe: Tap,
    then: &str,
) {
    use std::panic::AssertUnwindSafe;
    use std::sync::mpsc;
    let env = Env::new();
    let script = format!("{}echo $$; exec {then}", pipe.redirect());
    let options = sh(&script).kill_grace(Duration::from_secs(1));
    let (seen, chunks) = mpsc::channel::<Vec<u8>>();
    let observer = move |chunk: &[u8]| {
        let _ = seen.send(chunk.to_vec());
        std::panic::panic_any("the tap broke");
    };
    let (store, (ended_tx, ended_rx)) = (env.store.clone(), mpsc::channel());
    std::thread::spawn(move || {
        let run = std::panic::catch_unwind(AssertUnwindSafe(|| {
            D::run_observed(&store, options, pipe, observer)
        }));
        let _ = ended_tx.send(
            run.map(|r| r.is_ok())
                .map_err(|panic| panic.downcast_ref::<&str>().copied()),
        );
    });
    // A hang guard, not a timing assertion.
    let run = ended_rx.recv_timeout(WIRING_BOUND).expect("the run ended");
    assert_eq!(
        run,
        Err(Some("the tap broke")),
        "the panic reached the caller"
    );
    let chunk = chunks.try_recv().expect("the tap saw a chunk");
    assert!(chunks.try_recv().is_err(), "the tap was not called again");
    let pid: i32 = String::from_utf8_lossy(&chunk)
        .lines()
        .next()
        .and_then(|line| line.parse().ok())
        .expect("the chunk starts with the child's pid");
    assert!(ended(pid), "the child {pid} was stopped and reaped");
    let runs = env.store.records().unwrap();
    assert_eq!(runs.len(), 1, "the run's record was published");
    let record = env.store.record(&runs[0]).unwrap();
    assert_eq!(record.capture_status, CaptureStatus::Cancelled);
    assert!(record.incomplete);
    assert!(
        record.faults.iter().any(|f| {
            f.stream
                .as_ref()
                .is_some_and(|s| s.as_str() == pipe.stream())
                && f.message.contains("live tap")
        }),
        "{:?}",
        record.faults
    );
    assert_eq!(
        env.bytes(&record, pipe.stream()),
        chunk,
        "the chunk the tap panicked on was captured, and nothing after it"
    );
}

/// The live stdout tap (`RunBuilder::observe_stdout`): chunks reach the observer while the child
/// runs (the child waits for a marker the observer creates on seeing its first line, so a tap
/// that only delivered after the exit would make the child fail), lines reassembled by the
/// core's `LineSplitter` are the child's, and the retained artifact is byte-identical to the
/// concatenated chunks. The other pipe is not tapped. The same for a tap on stderr.
fn the_tap_sees_chunks_live_and_the_artifact_is_identical<D: Driver>(pipe: Tap) {
    use std::sync::{Arc, Mutex};
    let env = Env::new();
    let marker = env.path("seen");
    let script = format!(
        "{swap}printf 'first line\\n'; echo not-tapped >&2; i=0; \
         while [ ! -e '{m}' ]; do i=$((i+1)); [ $i -gt 1000 ] && exit 3; sleep 0.01; done; \
         seq 1 200000; printf 'last, without newline'",
        swap = pipe.redirect(),
        m = marker.display()
    );
    let seen = Arc::new(Mutex::new((Vec::<u8>::new(), 0usize, Vec::<String>::new())));
    let (tap, marker_path) = (seen.clone(), marker.clone());
    let mut splitter = agentrun_core::lines::LineSplitter::new(1 << 16);
    let result = D::run_observed(&env.store, sh(&script), pipe, move |chunk| {
        let mut guard = tap.lock().unwrap();
        let (bytes, chunks, lines) = &mut *guard;
        bytes.extend_from_slice(chunk);
        *chunks += 1;
        splitter.push(chunk, |line| {
            if line.bytes == b"first line" {
                fs::write(&marker_path, b"").unwrap();
            }
            lines.push(String::from_utf8_lossy(line.bytes).into_owned());
        });
    })
    .unwrap();
    assert_eq!(
        code(&result),
        Exit::Code(0),
        "the tap did not see the first line live"
    );
    let (bytes, chunks, lines) = &*seen.lock().unwrap();
    assert!(*chunks >= 2, "{chunks} chunks");
    assert_eq!(
        bytes,
        &env.bytes(&result.record, pipe.stream()),
        "the artifact differs from the tap"
    );
    assert!(!String::from_utf8_lossy(bytes).contains("not-tapped"));
    let other = match pipe {
        Tap::Stdout => "stderr",
        Tap::Stderr => "stdout",
    };
    assert_eq!(env.bytes(&result.record, other), b"not-tapped\n");
    assert_eq!(lines.first().map(String::as_str), Some("first line"));
    assert_eq!(lines.last().map(String::as_str), Some("200000"));
    assert_eq!(lines.len(), 200_001);
    assert!(bytes.ends_with(b"last, without newline"));
}

/// Progress reports (`RunBuilder::on_progress`): made on the driver's timer while the child
/// runs, with each stream's lines and bytes so far, never going back (the child waits for a
/// marker the report creates once it has counted the first two lines, so reports that only
/// came after the exit would make the child fail). The record keeps the run's directory and
/// label.
fn progress_is_reported_while_the_child_runs<D: Driver>() {
    use std::sync::{Arc, Mutex};
    let env = Env::new();
    let work = env.path("work");
    fs::create_dir(&work).unwrap();
    let marker = env.path("seen");
    let script = format!(
        "printf 'one\\ntwo\\n'; printf e >&2; i=0; \
         while [ ! -e '{m}' ]; do i=$((i+1)); [ $i -gt 6000 ] && exit 3; sleep 0.01; done; \
         printf three",
        m = marker.display()
    );
    let reports = Arc::new(Mutex::new(Vec::<RunProgress>::new()));
    let (seen, marker_path) = (reports.clone(), marker.clone());
    let options = sh(&script).current_dir(&work).label("progress");
    let result = D::run_reporting(&env.store, options, Duration::from_millis(20), move |p| {
        let counts: Vec<(u64, u64)> = p.streams.iter().map(|s| (s.lines, s.bytes)).collect();
        if counts == [(2, 8), (1, 1)] {
            fs::write(&marker_path, b"").unwrap();
        }
        seen.lock().unwrap().push(p.clone());
    })
    .unwrap();
    assert_eq!(
        code(&result),
        Exit::Code(0),
        "no report counted the first lines"
    );
    let reports = reports.lock().unwrap();
    let names: Vec<&str> = reports[0].streams.iter().map(|s| s.name.as_str()).collect();
    assert_eq!(names, ["stdout", "stderr"]);
    for pair in reports.windows(2) {
        assert!(pair[0].elapsed <= pair[1].elapsed, "{pair:?}");
        for (a, b) in pair[0].streams.iter().zip(&pair[1].streams) {
            assert!(a.bytes <= b.bytes && a.lines <= b.lines, "{pair:?}");
        }
    }
    let last = &reports[reports.len() - 1].streams[0];
    assert!(last.bytes <= 13 && last.lines <= 3, "{last:?}");
    assert_eq!(env.stdout(&result), "one\ntwo\nthree");
    let run = result.record.run.as_ref().unwrap();
    assert_eq!(run.label.as_deref(), Some("progress"));
    assert_eq!(run.cwd.as_deref(), Some(work.to_str().unwrap()));
}

/// `RunBuilder::on_ended` is called once, after the child has exited and its output is
/// drained and before the record is published; not at all when the spawn fails.
fn the_ended_hook_comes_after_the_exit_and_before_the_record<D: Driver>() {
    use std::sync::{Arc, Mutex};
    let env = Env::new();
    let left = env.path("left-behind");
    let seen = Arc::new(Mutex::new(Vec::new()));
    let script = format!("printf out; printf done > '{}'", left.display());
    let (store, calls, file) = (env.store.clone(), seen.clone(), left.clone());
    let result = D::run_with_ended(&env.store, sh(&script), move || {
        let written = fs::read(&file).unwrap_or_default();
        calls
            .lock()
            .unwrap()
            .push((written, store.records().unwrap().len()));
    })
    .unwrap();
    assert_eq!(code(&result), Exit::Code(0));
    assert_eq!(env.stdout(&result), "out");
    assert_eq!(
        *seen.lock().unwrap(),
        [(b"done".to_vec(), 0)],
        "one call, seeing what the child wrote and no record yet"
    );
    assert_eq!(
        env.store.records().unwrap(),
        std::slice::from_ref(&result.record.run_id)
    );
    let calls = seen.clone();
    let missing = RunOptions::new(env.path("no-such-program"));
    assert!(D::run_with_ended(&env.store, missing, move || calls.lock().unwrap().clear()).is_err());
    assert_eq!(
        seen.lock().unwrap().len(),
        1,
        "not called for a failed spawn"
    );
    // A hook that panics: the record is published all the same, then the panic goes on in
    // the caller.
    let store = env.store.clone();
    let panicked = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        D::run_with_ended(&store, sh("printf kept"), || panic!("hook panicked"))
    }));
    let payload = panicked.expect_err("the hook's panic reaches the caller");
    assert_eq!(payload.downcast_ref::<&str>(), Some(&"hook panicked"));
    assert_eq!(
        env.store.records().unwrap().len(),
        2,
        "the run's record is kept"
    );
}

/// A harness's stop signals (`RunOptions::stop_signals`, e.g. SIGINT then SIGTERM): on a
/// timeout the first one goes to the group, the next only after the grace period when the
/// child is still alive, each once; a child that ends on the first never sees the second.
fn stop_signals_are_sent_in_order_with_the_grace_between<D: Driver>() {
    use agentrun_core::harness::StopSignal;
    // A shell cannot trap a signal that was ignored when it started, and children inherit
    // an ignored SIGINT from a test run started in the background. A handler in this process
    // is reset to the default by exec, so the shells below start with SIGINT trappable.
    let _default_sigint_for_children =
        async_signal::Signals::new([async_signal::Signal::Int]).expect("a SIGINT handler");
    let env = Env::new();
    let log = env.path("signals");
    let grace = Duration::from_millis(400);
    let timeout = Duration::from_millis(300);
    // Ends on SIGINT.
    let script = format!(
        "trap 'echo int >> {l}; exit 0' INT; trap 'echo term >> {l}; exit 0' TERM; \
         echo ready; while :; do sleep 0.02; done",
        l = log.display()
    );
    let options = sh(&script)
        .timeout(timeout)
        .kill_grace(grace)
        .stop_signals(&[StopSignal::Interrupt, StopSignal::Terminate]);
    let r = D::run(&env.store, options).unwrap();
    assert_eq!(r.outcome, RunOutcome::TimedOut);
    assert_eq!(fs::read_to_string(&log).unwrap(), "int\n");
    // Ignores SIGINT: SIGTERM follows after the grace period.
    fs::remove_file(&log).unwrap();
    let script = format!(
        "trap 'echo int >> {l}' INT; trap 'echo term >> {l}; exit 0' TERM; \
         echo ready; while :; do sleep 0.02; done",
        l = log.display()
    );
    let options = sh(&script)
        .timeout(timeout)
        .kill_grace(grace)
        .stop_signals(&[StopSignal::Interrupt, StopSignal::Terminate]);
    let start = Instant::now();
    let r = D::run(&env.store, options).unwrap();
    assert_eq!(r.outcome, RunOutcome::TimedOut);
    assert!(start.elapsed() >= timeout + grace, "{:?}", start.elapsed());
    assert_eq!(fs::read_to_string(&log).unwrap(), "int\nterm\n");
    assert_eq!(env.stdout(&r), "ready\n");
}

macro_rules! conformance {
    ($module:ident, $driver:ty) => {
        mod $module {
            use super::*;

            #[test]
            fn proving_test() {
                super::proving_test::<$driver>();
            }
            #[test]
            fn a_stale_inherited_variable_is_removed() {
                super::a_stale_inherited_variable_is_removed::<$driver>(concat!(
                    module_path!(),
                    "::a_stale_inherited_variable_is_removed"
                ));
            }
            #[test]
            fn a_caller_env_entry_for_the_sink_variable_is_rejected_before_spawn() {
                super::a_caller_env_entry_for_the_sink_variable_is_rejected_before_spawn::<$driver>(
                );
            }
            #[test]
            fn the_variable_name_is_configurable() {
                super::the_variable_name_is_configurable::<$driver>();
            }
            #[test]
            fn the_allocated_sink_is_private_unique_and_removed() {
                super::the_allocated_sink_is_private_unique_and_removed::<$driver>();
            }
            #[test]
            fn a_caller_path_is_read_and_left_in_place() {
                super::a_caller_path_is_read_and_left_in_place::<$driver>();
            }
            #[test]
            fn sink_cases_give_their_typed_outcome() {
                super::sink_cases_give_their_typed_outcome::<$driver>();
            }
            #[test]
            fn a_symlinked_sink_is_refused() {
                super::a_symlinked_sink_is_refused::<$driver>();
            }
            #[test]
            fn concurrent_runs_have_their_own_sinks() {
                super::concurrent_runs_have_their_own_sinks::<$driver>();
            }
            #[test]
            fn exit_codes_and_signals() {
                super::exit_codes_and_signals::<$driver>();
            }
            #[test]
            fn spawn_failures_are_clear_errors() {
                super::spawn_failures_are_clear_errors::<$driver>();
            }
            #[test]
            fn argv_is_never_a_shell_and_the_working_directory_applies() {
                super::argv_is_never_a_shell_and_the_working_directory_applies::<$driver>();
            }
            #[test]
            fn the_child_runs_in_its_own_process_group() {
                super::the_child_runs_in_its_own_process_group::<$driver>();
            }
            #[test]
            fn stdin_null_bytes_and_inherit() {
                super::stdin_null_bytes_and_inherit::<$driver>();
            }
            #[test]
            fn a_timeout_stops_the_whole_group() {
                super::a_timeout_stops_the_whole_group::<$driver>();
            }
            #[test]
            fn a_grandchild_outside_the_group_does_not_hang_the_run() {
                super::a_grandchild_outside_the_group_does_not_hang_the_run::<$driver>();
            }
            #[test]
            fn the_idle_timeout_counts_from_the_last_output() {
                super::the_idle_timeout_counts_from_the_last_output::<$driver>();
            }
            #[test]
            fn leftovers_holding_the_pipes_do_not_hold_the_run() {
                super::leftovers_holding_the_pipes_do_not_hold_the_run::<$driver>();
            }
            #[test]
            fn the_rest_of_the_group_gets_the_grace_after_the_child_dies() {
                super::the_rest_of_the_group_gets_the_grace_after_the_child_dies::<$driver>();
            }

            #[test]
            fn a_dropped_run_leaves_the_rest_of_the_group_its_grace() {
                super::a_dropped_run_leaves_the_rest_of_the_group_its_grace::<$driver>();
            }

            #[test]
            fn a_group_of_zombies_does_not_cost_the_grace() {
                super::a_group_of_zombies_does_not_cost_the_grace::<$driver>();
            }

            #[test]
            fn a_live_thread_behind_a_zombie_leader_gets_sigkill() {
                super::a_live_thread_behind_a_zombie_leader_gets_sigkill::<$driver>();
            }

            #[test]
            fn a_background_process_is_stopped_at_the_end_of_the_run() {
                super::a_background_process_is_stopped_at_the_end_of_the_run::<$driver>();
            }

            #[test]
            fn keep_background_keeps_what_the_child_left_running() {
                super::keep_background_keeps_what_the_child_left_running::<$driver>();
            }

            #[test]
            fn a_stop_future_cancels_the_run_and_returns_its_result() {
                super::a_stop_future_cancels_the_run_and_returns_its_result::<$driver>();
            }
            #[test]
            fn an_escaped_pipe_holder_does_not_cost_the_grace() {
                super::an_escaped_pipe_holder_does_not_cost_the_grace::<$driver>();
            }
            #[test]
            fn the_group_is_stopped_when_the_runner_is_killed() {
                super::the_group_is_stopped_when_the_runner_is_killed::<$driver>(concat!(
                    module_path!(),
                    "::the_group_is_stopped_when_the_runner_is_killed"
                ));
            }
            #[test]
            fn every_group_in_flight_is_stopped_when_the_runner_is_killed() {
                super::every_group_in_flight_is_stopped_when_the_runner_is_killed::<$driver>(
                    concat!(
                        module_path!(),
                        "::every_group_in_flight_is_stopped_when_the_runner_is_killed"
                    ),
                );
            }
            #[test]
            fn a_second_stop_request_kills_at_once() {
                super::a_second_stop_request_kills_at_once::<$driver>();
            }
            #[test]
            fn dropping_the_future_cancels_the_run() {
                super::dropping_the_future_cancels_the_run::<$driver>();
            }
            #[test]
            fn a_slow_tap_delays_the_end_and_loses_nothing() {
                super::a_slow_tap_delays_the_end_and_loses_nothing::<$driver>();
            }
            #[test]
            fn progress_is_reported_while_the_child_runs() {
                super::progress_is_reported_while_the_child_runs::<$driver>();
            }
            #[test]
            fn the_ended_hook_comes_after_the_exit_and_before_the_record() {
                super::the_ended_hook_comes_after_the_exit_and_before_the_record::<$driver>();
            }
            #[test]
            fn the_stdout_tap_sees_chunks_live_and_the_artifact_is_identical() {
                super::the_tap_sees_chunks_live_and_the_artifact_is_identical::<$driver>(
                    super::Tap::Stdout,
                );
            }
            #[test]
            fn the_stderr_tap_sees_chunks_live_and_the_artifact_is_identical() {
                super::the_tap_sees_chunks_live_and_the_artifact_is_identical::<$driver>(
                    super::Tap::Stderr,
                );
            }
            #[test]
            fn a_stdout_tap_that_panics_stops_the_run_and_keeps_what_was_captured() {
                super::a_panicking_tap_stops_the_run_and_keeps_what_was_captured::<$driver>(
                    super::Tap::Stdout,
                    "sleep 60",
                );
            }
            #[test]
            fn a_stderr_tap_that_panics_under_a_flood_stops_the_run_and_keeps_what_was_captured()
            {
                super::a_panicking_tap_stops_the_run_and_keeps_what_was_captured::<$driver>(
                    super::Tap::Stderr,
                    "yes",
                );
            }
            #[test]
            fn late_output_of_an_escaped_pipe_holder_marks_the_capture_incomplete() {
                super::late_output_of_an_escaped_pipe_holder_marks_the_capture_incomplete::<
                    $driver,
                >();
            }
            #[test]
            fn a_sink_directory_that_cannot_be_removed_is_reported_with_the_result() {
                super::a_sink_directory_that_cannot_be_removed_is_reported_with_the_result::<
                    $driver,
                >();
            }
            #[test]
            fn stop_signals_are_sent_in_order_with_the_grace_between() {
                super::stop_signals_are_sent_in_order_with_the_grace_between::<$driver>();
            }
            #[test]
            fn a_quarter_gigabyte_on_each_stream_is_captured_intact() {
                super::in_a_process_of_its_own(concat!(
                    stringify!($module),
                    "::quarter_gigabyte_flood"
                ));
            }
            #[test]
            #[ignore = "run by a_quarter_gigabyte_on_each_stream_is_captured_intact"]
            fn quarter_gigabyte_flood() {
                super::a_flood_on_each_stream_is_captured_intact::<$driver>(256 << 20);
            }
            #[test]
            #[ignore = "writes 2 GiB to the temporary directory; run with --ignored"]
            fn a_gigabyte_on_each_stream_is_captured_intact() {
                super::a_flood_on_each_stream_is_captured_intact::<$driver>(1 << 30);
            }
        }
    };
}

conformance!(smol, Smol);
conformance!(tokio, Tokio);

/// Both drivers export the same public names (a compile-time check: a name missing from
/// either crate fails the build of this suite).
#[test]
fn both_drivers_export_the_same_names() {
    macro_rules! same {
        ($($name:ident),* $(,)?) => {{
            {
                #[allow(unused_imports)]
                use agentrun_smol::{$($name),*};
            }
            {
                #[allow(unused_imports)]
                use agentrun_tokio::{$($name),*};
            }
        }};
    }
    same!(
        Runner,
        RunBuilder,
        RunError,
        RunOptions,
        ProcessResult,
        RunOutcome,
        Exit,
        StdinMode,
        OptionsError,
        ResultSink,
        SinkOutcome,
        FileKind,
        NotReadReason,
        DEFAULT_SINK_VAR,
        DEFAULT_SINK_CAP,
        read_sink,
    );
    fn runner_api<R>(_: fn(Store) -> R, _: fn(&R) -> &Store) {}
    runner_api(agentrun_smol::Runner::new, agentrun_smol::Runner::store);
    runner_api(agentrun_tokio::Runner::new, agentrun_tokio::Runner::store);
}
