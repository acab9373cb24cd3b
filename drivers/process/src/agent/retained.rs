//! The harness's retained record, read once its run has ended: Codex's session file, the
//! Gemini CLI's log, `opencode export`, the Muse, Qwen Code and pi session logs.

use super::*;

/// A Codex session file before the run: its path, its length, its running token total.
pub(super) struct CodexSnapshot {
    path: PathBuf,
    len: u64,
    total: Option<agentrun_core::harness::Usage>,
}

pub(super) fn codex_snapshot(sessions: &Path, id: &str) -> Option<CodexSnapshot> {
    let path = find_codex_session(sessions, id)?;
    let bytes = read_capped(&path, 0).ok()?;
    Some(CodexSnapshot {
        path,
        len: bytes.len() as u64,
        total: codex_token_total(&bytes),
    })
}

/// Reads the log of Gemini CLI session `id`: the newest candidate
/// ([`find_gemini_log`]) whose header names the session.
fn read_gemini_log(options: &AgentOptions, id: &str) -> Result<Vec<u8>, String> {
    const WHAT: &str = "the Gemini session log";
    let candidates = find_gemini_log(|k| options.child_env(k), id)
        .ok_or_else(|| format!("{WHAT} cannot be found: no HOME"))?;
    let mut last_error = None;
    for path in &candidates {
        match read_capped(path, 0) {
            Ok(bytes) => match RetainedKind::GeminiSessionLog.parse(Some(id), &bytes) {
                Ok(_) => return Ok(bytes),
                Err(e) => last_error = Some(format!("{WHAT} {}: {e}", path.display())),
            },
            Err(e) => last_error = Some(format!("{WHAT} {}: {e}", path.display())),
        }
    }
    Err(last_error.unwrap_or_else(|| format!("{WHAT} of session {id} was not found")))
}

/// Reads and parses the retained record; the error says why it is absent.
pub(super) async fn acquire<R: Runtime>(
    runner: &Runner<R>,
    options: &AgentOptions,
    request: &RetainedRequest,
    codex_before: Option<CodexSnapshot>,
) -> Result<RetainedRecord, String> {
    let what = request.kind.description();
    let id = request
        .session_id
        .clone()
        .or_else(|| options.request.resume.clone());
    let file = match &options.retained {
        RetainedSource::Skip => return Err(format!("{what} was not requested")),
        RetainedSource::File(path) => Some(path.clone()),
        RetainedSource::Harness => None,
    };
    let bytes = match file {
        Some(path) => {
            blocking(runner, move || {
                read_capped(&path, 0).map_err(|e| format!("{what} {}: {e}", path.display()))
            })
            .await?
        }
        None => {
            let id =
                id.ok_or_else(|| format!("{what} cannot be read: the stream named no session"))?;
            if !plausible_session_id(&id) {
                return Err(format!(
                    "{what} cannot be read: the session id {id:?} is not a plain identifier"
                ));
            }
            match request.kind {
                RetainedKind::OpenCodeExport => opencode_export(runner, options, &id)
                    .await
                    .map_err(|e| format!("{what} (opencode export {id}): {e}"))?,
                RetainedKind::MuseSessionLog => {
                    let options = options.clone();
                    blocking(runner, move || {
                        let path = find_muse_log(|k| options.child_env(k), &id)
                            .ok_or_else(|| format!("{what} of session {id} was not found"))?;
                        read_capped(&path, 0).map_err(|e| format!("{what} {}: {e}", path.display()))
                    })
                    .await?
                }
                RetainedKind::CodexSession => {
                    let dir = codex_sessions_dir(|k| options.child_env(k));
                    let mut record = blocking(runner, move || {
                        let (path, offset) = match &codex_before {
                            Some(before) => (before.path.clone(), before.len),
                            None => (
                                dir.and_then(|d| find_codex_session(&d, &id))
                                    .ok_or_else(|| {
                                        format!("{what} of thread {id} was not found")
                                    })?,
                                0,
                            ),
                        };
                        let bytes = read_capped(&path, offset)
                            .map_err(|e| format!("{what} {}: {e}", path.display()))?;
                        RetainedKind::CodexSession
                            .parse(Some(&id), &bytes)
                            .map_err(|e| format!("{what} is unreadable: {e}"))
                            .map(|r| (r, codex_before.and_then(|b| b.total)))
                    })
                    .await?;
                    record.0.usage_baseline = record.1.take();
                    return Ok(record.0);
                }
                RetainedKind::QwenSessionLog | RetainedKind::PiSessionLog => {
                    let options = options.clone();
                    let kind = match request.kind {
                        RetainedKind::QwenSessionLog => SessionLog::Qwen,
                        _ => SessionLog::Pi,
                    };
                    blocking(runner, move || {
                        let path = find_session_log(|k| options.child_env(k), kind, &id)
                            .ok_or_else(|| format!("{what} of session {id} was not found"))?;
                        read_capped(&path, 0).map_err(|e| format!("{what} {}: {e}", path.display()))
                    })
                    .await?
                }
                RetainedKind::GeminiSessionLog => {
                    let options = options.clone();
                    blocking(runner, move || read_gemini_log(&options, &id)).await?
                }
                _ => return Err(format!("{what} cannot be read by this version")),
            }
        }
    };
    request
        .kind
        .parse(request.session_id.as_deref(), &bytes)
        .map_err(|e| format!("{what} is unreadable: {e}"))
}

async fn blocking<R: Runtime, T: Send + 'static>(
    runner: &Runner<R>,
    job: impl FnOnce() -> Result<T, String> + Send + 'static,
) -> Result<T, String> {
    runner
        .runtime
        .spawn_blocking(job)
        .await
        .map_err(|e| e.to_string())?
}

/// Reads `path` from `offset`, refusing more than [`RETAINED_CAP`] bytes, and anything but a
/// regular file: a FIFO in its place would block the open (and the `await` of the turn that
/// reads it) until a writer came.
pub(super) fn read_capped(path: &Path, offset: u64) -> io::Result<Vec<u8>> {
    let (mut file, meta) = agentrun_fs::special::open_regular_file(path)?;
    let len = meta.len();
    if len.saturating_sub(offset) > RETAINED_CAP {
        return Err(io::Error::other(format!(
            "larger than {} MiB",
            RETAINED_CAP >> 20
        )));
    }
    file.seek(SeekFrom::Start(offset))?;
    let mut bytes = Vec::new();
    file.take(RETAINED_CAP).read_to_end(&mut bytes)?;
    Ok(bytes)
}

/// Runs `opencode export ID` in the harness's environment (retained in the store like any
/// run, with a short timeout) and returns its stdout.
async fn opencode_export<R: Runtime>(
    runner: &Runner<R>,
    options: &AgentOptions,
    id: &str,
) -> Result<Vec<u8>, String> {
    let program = options
        .program
        .as_deref()
        .map_or(OsStr::new("opencode"), Path::as_os_str);
    let mut export = RunOptions::new(program)
        .args(["export", id])
        .timeout(EXPORT_TIMEOUT)
        .kill_grace(Duration::from_secs(1));
    if let Some(dir) = &options.current_dir {
        export = export.current_dir(dir);
    }
    let export = options.with_env(export);
    let result = runner.run(export).await.map_err(|e| e.to_string())?;
    match (result.outcome, result.exit) {
        (RunOutcome::Completed, Some(Exit::Code(0))) => {}
        (RunOutcome::Completed, exit) => {
            return Err(exit_diagnostic(Harness::OpenCode, exit, &result));
        }
        _ => return Err(format!("timed out after {}s", EXPORT_TIMEOUT.as_secs())),
    }
    let stdout = result.stdout().ok_or("no stdout was captured")?;
    if stdout.bytes > RETAINED_CAP {
        return Err(format!("larger than {} MiB", RETAINED_CAP >> 20));
    }
    let uri = result.record.stream_uri(stdout);
    let store = runner.store.clone();
    blocking(runner, move || {
        let mut bytes = Vec::new();
        store.copy_to(&uri, &mut bytes).map_err(|e| e.to_string())?;
        Ok(bytes)
    })
    .await
}
