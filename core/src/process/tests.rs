use super::*;

/// A finished two-stream run whose stdout is `stdout`.
fn result(outcome: RunOutcome, exit: Option<Exit>, stdout: &[u8]) -> ProcessResult {
    use crate::capture::Capture;
    use crate::stream::{OutputChannel, StreamName};
    let mut capture =
        Capture::new(OutputDeclaration::stdout_stderr(), PreviewLimits::default()).unwrap();
    let channel = OutputChannel::Named(StreamName::new("stdout").unwrap());
    let stream = capture.resolve(&channel).unwrap().unwrap();
    capture.handle_chunk(stream, stdout);
    let summary = capture.finish(None, outcome.capture_status());
    ProcessResult {
        outcome,
        exit,
        duration: Duration::from_millis(1500),
        record: ResultRecord::from_summary("run-1".to_owned(), &summary),
        result: None,
        sink: SinkOutcome::NotRequested,
        sink_cleanup_error: None,
        pid: Some(42),
        label: None,
    }
}

#[test]
fn the_command_is_bounded_as_its_record_holds_it() {
    // Every word costs its length plus one: a million empty arguments are too many too.
    let empties = RunOptions::new("p").args(vec![""; MAX_COMMAND_BYTES - 2]);
    assert_eq!(command_bytes(&empties.command()), MAX_COMMAND_BYTES);
    assert_eq!(empties.validate(), Ok(()));
    let over = empties.arg("");
    assert_eq!(
        over.validate(),
        Err(OptionsError::CommandTooLong {
            bytes: MAX_COMMAND_BYTES + 1
        })
    );
    // Counted after lossy decoding, as recorded: an invalid byte becomes three.
    use std::os::unix::ffi::OsStrExt;
    let invalid = OsStr::from_bytes(&[0xff]);
    let lossy = RunOptions::new("p").arg(invalid);
    assert_eq!(command_bytes(&lossy.command()), 2 + 4);
    assert!(
        over.validate()
            .unwrap_err()
            .to_string()
            .contains("at most 1048576")
    );
}

#[test]
fn a_process_result_serializes_as_run_json_prints_it() {
    let r = result(RunOutcome::Completed, Some(Exit::Code(1)), b"a\nb\n");
    let json = serde_json::to_value(&r).unwrap();
    let manifest = r.record.output_uri().to_string();
    let stdout = r.record.stream_uri(r.stdout().unwrap()).to_string();
    let stderr = r.record.stream_uri(r.stderr().unwrap()).to_string();
    assert_eq!(
        json,
        serde_json::json!({
            "run_id": "run-1",
            "status": "failed",
            "reason": "exit 1",
            "outcome": "completed",
            "exit": {"code": 1},
            "pid": 42,
            "duration_ms": 1500,
            "artifacts": {"manifest": manifest, "stdout": stdout, "stderr": stderr},
            "model_text": r.model_text(),
            "result": null,
            "sink": {"outcome": "not_requested"},
            "record": serde_json::to_value(&r.record).unwrap(),
        })
    );
    // The artifacts keep their order: the manifest, then the streams as declared.
    let text = serde_json::to_string(&r).unwrap();
    let at = |key: &str| text.find(&format!("\"{key}\":\"artifact://")).unwrap();
    assert!(
        at("manifest") < at("stdout") && at("stdout") < at("stderr"),
        "{text}"
    );
    // A label is shown only when set.
    let labelled = ProcessResult {
        label: Some("build".to_owned()),
        ..r
    };
    assert_eq!(serde_json::to_value(&labelled).unwrap()["label"], "build");
}

#[test]
fn status_words_follow_the_outcome_then_the_exit() {
    let cases = [
        (
            RunOutcome::Completed,
            Some(Exit::Code(0)),
            RunStatus::Succeeded,
            "exit 0",
        ),
        (
            RunOutcome::Completed,
            Some(Exit::Code(2)),
            RunStatus::Failed,
            "exit 2",
        ),
        (
            RunOutcome::Completed,
            Some(Exit::Signal(9)),
            RunStatus::Failed,
            "killed by signal 9",
        ),
        (
            RunOutcome::Completed,
            None,
            RunStatus::Failed,
            "no exit status",
        ),
        (
            RunOutcome::TimedOut,
            Some(Exit::Code(0)),
            RunStatus::Cancelled,
            "timed out",
        ),
        (
            RunOutcome::IdleTimedOut,
            None,
            RunStatus::Cancelled,
            "idle timeout: no output",
        ),
        (
            RunOutcome::Cancelled,
            None,
            RunStatus::Cancelled,
            "stopped by a signal",
        ),
    ];
    for (outcome, exit, status, reason) in cases {
        assert_eq!(outcome.status(exit), status, "{outcome:?} {exit:?}");
        assert_eq!(outcome.reason(exit), reason, "{outcome:?} {exit:?}");
        let json = serde_json::to_value(result(outcome, exit, b"")).unwrap();
        assert_eq!(json["status"], status.as_str());
    }
}

#[test]
fn the_sink_variable_belongs_to_the_runner() {
    let ok = RunOptions::new("true").env_remove(DEFAULT_SINK_VAR);
    assert_eq!(ok.validate(), Ok(()));
    let err = RunOptions::new("true")
        .env(DEFAULT_SINK_VAR, "/tmp/x")
        .validate()
        .unwrap_err();
    assert!(matches!(err, OptionsError::SinkVarInEnv { .. }), "{err}");
    assert!(err.to_string().contains("with_result_sink"), "{err}");
    // The configured name is the one guarded.
    let custom = RunOptions::new("true").sink_var("AMPLIHACK_RESULT_SINK");
    assert_eq!(custom.clone().env(DEFAULT_SINK_VAR, "x").validate(), Ok(()));
    assert!(matches!(
        custom.env("AMPLIHACK_RESULT_SINK", "x").validate(),
        Err(OptionsError::SinkVarInEnv { .. })
    ));
    for bad in ["", "A=B", "A\0"] {
        assert!(matches!(
            RunOptions::new("true").sink_var(bad).validate(),
            Err(OptionsError::InvalidSinkVar { .. })
        ));
    }
    assert!(matches!(
        RunOptions::new("true")
            .with_result_sink(ResultSink::Path("rel/x".into()))
            .validate(),
        Err(OptionsError::RelativeSinkPath { .. })
    ));
    assert!(matches!(
        RunOptions::new("true")
            .idle_timeout(Duration::ZERO)
            .validate(),
        Err(OptionsError::ZeroTimeout { .. })
    ));
}

#[test]
fn stopped_runs_are_incomplete_and_their_sink_is_not_read() {
    assert_eq!(
        RunOutcome::Completed.capture_status(),
        CaptureStatus::Succeeded
    );
    assert_eq!(RunOutcome::Completed.sink_not_read(), None);
    assert_eq!(
        RunOutcome::TimedOut.capture_status(),
        CaptureStatus::Cancelled
    );
    assert_eq!(
        RunOutcome::IdleTimedOut.sink_not_read(),
        Some(NotReadReason::IdleTimedOut)
    );
}
