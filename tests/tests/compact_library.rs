//! The library's compaction call (`Runner::compact`) on both runtimes, with command
//! summarizers: the same transcript and summarizer give the same attempts, summary,
//! references and retained artifacts on smol and tokio, and every reference reads back the
//! output it replaced.

use std::future::IntoFuture;
use std::sync::{Arc, Mutex, OnceLock};

use agentrun_core::compaction::{AttemptKind, AttemptResult, CompactionError};
use agentrun_core::page::ByteRange;
use agentrun_fs::Store;
use agentrun_process::{
    CompactError, CompactEvent, CompactOptions, CompactRun, Summarizer, TranscriptInput,
    TranscriptLoadError,
};
use serde_json::json;

fn tokio_runtime() -> &'static tokio::runtime::Runtime {
    static RT: OnceLock<tokio::runtime::Runtime> = OnceLock::new();
    RT.get_or_init(|| {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .expect("a tokio runtime")
    })
}

/// Runs one compaction on the named runtime, collecting its progress events.
fn compact(
    runtime: &str,
    store: &Store,
    input: TranscriptInput,
    options: CompactOptions,
) -> (Result<CompactRun, CompactError>, Vec<CompactEvent>) {
    let events = Arc::new(Mutex::new(Vec::new()));
    let sink = events.clone();
    let progress = move |e: &CompactEvent| sink.lock().unwrap().push(e.clone());
    let result = match runtime {
        "smol" => {
            let runner = agentrun_smol::Runner::new(store.clone());
            smol::block_on(
                runner
                    .compact(input, options)
                    .on_progress(progress)
                    .into_future(),
            )
        }
        "tokio" => {
            let runner = agentrun_tokio::Runner::new(store.clone());
            tokio_runtime().block_on(
                runner
                    .compact(input, options)
                    .on_progress(progress)
                    .into_future(),
            )
        }
        other => unreachable!("{other}"),
    };
    let events = events.lock().unwrap().clone();
    (result, events)
}

/// A summarizer that refuses an input over `limit` bytes the way a model CLI wrapper would
/// (the marker on stderr, exit 1) and answers a short one.
fn limited_summarizer(limit: usize) -> Summarizer {
    let script = format!(
        "n=$(wc -c); if [ \"$n\" -gt {limit} ]; then echo 'provider: prompt is too long' >&2; \
         echo agentrun:context-length-exceeded >&2; exit 1; fi; echo \"SUMMARY of $n bytes\""
    );
    Summarizer::command("/bin/sh", ["-c", script.as_str()])
}

fn transcript_bytes() -> Vec<u8> {
    let log = "error[E0425]: cannot find value `fixture` in this scope\n".repeat(400);
    serde_json::to_vec(&json!({
        "messages": [
            {"role": "user", "content": "Why does cargo build fail?"},
            {"role": "assistant", "content": [
                {"type": "tool_use", "id": "toolu_1", "name": "bash", "input": {"command": "cargo build"}}
            ]},
            {"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": "toolu_1", "content": log}
            ]},
            {"role": "assistant", "content": "The fixture module is missing; I added it."}
        ],
        "recent_start": 3
    }))
    .unwrap()
}

#[test]
fn the_pruned_retry_runs_the_same_on_both_runtimes() {
    let log = "error[E0425]: cannot find value `fixture` in this scope\n".repeat(400);
    let mut outcomes = Vec::new();
    for runtime in ["smol", "tokio"] {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path().join("store")).unwrap();
        let (result, events) = compact(
            runtime,
            &store,
            TranscriptInput::Bytes(transcript_bytes()),
            CompactOptions::new(limited_summarizer(8_000)),
        );
        let done = result.unwrap_or_else(|e| panic!("{runtime}: {e}"));
        assert!(
            done.summary.starts_with("SUMMARY of "),
            "{runtime}: {}",
            done.summary
        );
        assert_eq!(done.attempts.len(), 2, "{runtime}");
        assert!(matches!(
            done.attempts[0].result,
            AttemptResult::ContextLength { .. }
        ));
        assert_eq!(done.attempts[1].result, AttemptResult::Summarized);
        assert_eq!(done.retry_reason(), Some("context length exceeded"));
        // The compacted transcript: the new summary, then the recent message.
        assert_eq!(
            done.transcript.summary.as_deref(),
            Some(done.summary.as_str())
        );
        assert_eq!(done.transcript.messages.len(), 1);
        // The one reference reads back exactly the output it replaced, and the record keeps it.
        assert_eq!(done.references.len(), 1, "{runtime}");
        let reference = &done.references[0];
        assert_eq!(reference.tool_use_id, "toolu_1");
        let uri = agentrun_core::ArtifactUri::parse(&reference.uri).unwrap();
        let page = store
            .read_bytes(&uri, ByteRange::new(0, 1 << 20).unwrap())
            .unwrap();
        assert_eq!(page.bytes, log.as_bytes(), "{runtime}");
        let retained = done.retained.as_ref().expect("a retention record");
        assert_eq!(retained.kept.len(), 1);
        assert_eq!(retained.kept[0].to_string(), reference.uri);
        // Progress: the first attempt, its failure, the retention, the retry.
        assert!(
            matches!(
                events.as_slice(),
                [
                    CompactEvent::Summarizing {
                        kind: AttemptKind::First,
                        ..
                    },
                    CompactEvent::AttemptFailed {
                        kind: AttemptKind::First,
                        ..
                    },
                    CompactEvent::Retaining { outputs: 1 },
                    CompactEvent::Summarizing {
                        kind: AttemptKind::Retry,
                        ..
                    },
                ]
            ),
            "{runtime}: {events:?}"
        );
        outcomes.push((done.summary, done.attempts, reference.uri.clone()));
    }
    assert_eq!(outcomes[0], outcomes[1], "smol and tokio differ");
}

/// A summary is read one byte past its bound: a longer answer is refused as too long, never
/// cut to the bound and taken for a summary.
#[test]
fn a_summary_over_the_bound_is_refused_not_cut() {
    for runtime in ["smol", "tokio"] {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path().join("store")).unwrap();
        let summarizer = Summarizer::command(
            "/bin/sh",
            [
                "-c",
                "cat >/dev/null; head -c 1048586 /dev/zero | tr '\\0' a",
            ],
        );
        let (result, _) = compact(
            runtime,
            &store,
            TranscriptInput::Bytes(transcript_bytes()),
            CompactOptions::new(summarizer),
        );
        let error = result.expect_err("an over-long summary");
        let Some(CompactionError::InvalidSummary { detail, .. }) = error.compaction_error() else {
            panic!("{runtime}: {error}");
        };
        assert!(
            detail.contains("over the 1048576-byte limit"),
            "{runtime}: {detail}"
        );
    }
}

/// A summarizer failure that is not about size ends compaction without a retry, and the
/// error says so with the attempts.
#[test]
fn an_ordinary_failure_is_not_retried() {
    for runtime in ["smol", "tokio"] {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path().join("store")).unwrap();
        let summarizer = Summarizer::command(
            "/bin/sh",
            ["-c", "cat >/dev/null; echo rate limited >&2; exit 3"],
        );
        let (result, _) = compact(
            runtime,
            &store,
            TranscriptInput::Bytes(transcript_bytes()),
            CompactOptions::new(summarizer),
        );
        let error = result.expect_err("a failed summarizer");
        let failed = error.failed().expect("a compaction failure");
        assert_eq!(failed.attempts.len(), 1, "{runtime}");
        assert!(
            matches!(failed.error, CompactionError::Summarizer { .. }),
            "{runtime}: {error}"
        );
    }
}

/// A transcript that is not a file is refused with a typed error naming the path, before any
/// summarizer runs.
#[test]
fn a_directory_is_not_a_transcript() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path().join("store")).unwrap();
    for runtime in ["smol", "tokio"] {
        let (result, events) = compact(
            runtime,
            &store,
            TranscriptInput::Path(dir.path().to_owned()),
            CompactOptions::new(limited_summarizer(8_000)),
        );
        let error = result.expect_err("a directory");
        assert!(
            matches!(
                error,
                CompactError::Transcript(TranscriptLoadError::Open { .. })
            ),
            "{runtime}: {error}"
        );
        assert!(error.to_string().contains("directory"), "{error}");
        assert!(events.is_empty());
    }
}

/// Both runtime crates export the compaction API under the same names (a compile-time check).
#[test]
fn both_runtimes_export_the_compaction_names() {
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
        CompactError,
        CompactEvent,
        CompactOptions,
        CompactRun,
        Summarizer,
        SummarizerSetupError,
        TranscriptInput,
        TranscriptLoadError,
        LoadedTranscript,
        load_transcript,
        CONTEXT_LENGTH_MARKER,
    );
}

/// A harness that takes its prompt as one argument bounds the input by that argument's size
/// (the registry's prompt delivery): a larger first input is a local fit rejection, never a
/// launch that fails with E2BIG, and the pruned retry follows.
#[test]
fn an_argument_prompt_is_bounded_by_the_argument_size() {
    use agentrun_core::harness::{Harness, LaunchRequest, MAX_ARG_BYTES};
    use agentrun_process::AgentOptions;
    let bound = Harness::Grok
        .prompt_delivery(&LaunchRequest::default())
        .max_prompt_bytes()
        .expect("grok takes its prompt as an argument");
    assert_eq!(bound, MAX_ARG_BYTES - "--single=".len());
    let big = "x".repeat(MAX_ARG_BYTES + 1000);
    let transcript = serde_json::to_vec(&json!({"messages": [
        {"role": "assistant", "content": [
            {"type": "tool_use", "id": "toolu_1", "name": "bash", "input": {"command": "cat big"}}
        ]},
        {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "toolu_1", "content": big}
        ]}
    ]}))
    .unwrap();
    for runtime in ["smol", "tokio"] {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path().join("store")).unwrap();
        // No such program: only the retry tries to launch it.
        let agent = AgentOptions::new(Harness::Grok, "").program(dir.path().join("no-grok"));
        let (result, events) = compact(
            runtime,
            &store,
            TranscriptInput::Bytes(transcript.clone()),
            CompactOptions::new(Summarizer::Agent(agent)),
        );
        let error = result.expect_err("no grok to run");
        let failed = error.failed().expect("a compaction failure");
        assert!(
            matches!(&failed.attempts[0].result, AttemptResult::DoesNotFit { detail }
                if detail.contains(&format!("over the {bound}-byte limit"))),
            "{runtime}: {:?}",
            failed.attempts
        );
        assert_eq!(failed.attempts.len(), 2, "{runtime}: the retry ran");
        assert!(
            matches!(&failed.attempts[1].result, AttemptResult::Failed { detail } if detail.contains("cannot run")),
            "{runtime}: {:?}",
            failed.attempts
        );
        // The first attempt never reached a summarizer.
        assert!(
            matches!(events.first(), Some(CompactEvent::Retaining { outputs: 1 })),
            "{runtime}: {events:?}"
        );
    }
}
