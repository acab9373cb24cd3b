//! One attempt of a fan-out: its isolation, its agent run (or auto session), the count and
//! commit of its change, its verification.

use super::*;
use crate::auto_mode::artifact_uris;

/// One attempt's agent part: isolate, run, commit and count, keep the patch.
pub(super) async fn attempt<R: Runtime>(
    runner: Runner<R>,
    ctx: Arc<Context>,
    n: usize,
    stop: StopSignal,
) -> Done {
    let mut data = AgentData::default();
    let spec = ctx.options.attempts[n].clone();
    let branch = ctx
        .repo
        .as_ref()
        .map(|_| format!("agentrun/{}/{n}", ctx.fanout_id));
    let isolated = {
        let (ctx, branch) = (ctx.clone(), branch.clone());
        runner
            .runtime
            .spawn_blocking(move || isolate(&ctx, n, branch.as_deref(), spec.harness))
            .await
    };
    let codex_home = match isolated {
        Ok(Ok(home)) => home,
        Ok(Err(e)) => return agent_error(n, data, crate::error_chain(&e)),
        Err(e) => return agent_error(n, data, crate::error_chain(&e)),
    };
    let worktree = ctx.dir.worktree(n);
    data.worktree = Some(worktree.clone());
    data.branch = branch;
    let here = run_dir(&worktree, ctx.repo.as_ref());
    emit(
        &ctx.events,
        FanOutEvent::Started {
            attempt: n,
            worktree: &worktree,
        },
    );
    let progress = {
        let events = ctx.events.clone();
        move |line: &str| emit(&events, FanOutEvent::Progress { attempt: n, line })
    };
    // In a repository the count of the attempt's change starts with a `git status`, started
    // as soon as the harness has ended (beside the publication of its record).
    let early = ctx
        .repo
        .as_ref()
        .map(|_| Arc::new(isolation::EarlyStatus::default()));
    let end = if ctx.options.auto {
        run_auto(
            &runner, &ctx, n, &here, codex_home, stop, progress, &mut data,
        )
        .await
    } else {
        let mut turn = ctx.options.turn(n, &here, ctx.repo.is_some());
        if let Some(home) = &codex_home {
            turn = turn.env("CODEX_HOME", home);
        }
        let mut run = runner
            .agent(turn)
            .on_progress(progress)
            .cancel_on(stop.stream());
        if let Some(early) = &early {
            let (early, worktree) = (early.clone(), worktree.clone());
            run = run.on_harness_ended(move || early.start(&worktree));
        }
        let run = run.await;
        match run {
            Ok(run) => {
                data.artifacts = artifact_uris(&run.process);
                if let Some(c) = &run.completion {
                    data.failure_kind = c.outcome.failure_kind;
                    data.usage = c.report.usage.clone();
                    data.session_id = c.outcome.session_id.clone();
                }
                if run.stopped() == Some(RunOutcome::Cancelled) {
                    AgentEnd::Stopped
                } else if run.succeeded() {
                    AgentEnd::Succeeded
                } else {
                    AgentEnd::Failed
                }
            }
            Err(e) => {
                data.error = Some(crate::error_chain(&e));
                AgentEnd::Error
            }
        }
    };
    // What the attempt changed, committed on its branch: also for a failed or stopped one,
    // so the record says how far it got.
    let counted = {
        let (ctx, worktree) = (ctx.clone(), worktree.clone());
        let message = format!(
            "agentrun fanout {} attempt {n}: {}",
            ctx.fanout_id,
            ctx.options.attempts[n].label()
        );
        runner
            .runtime
            .spawn_blocking(move || match &ctx.repo {
                // After an error the last run may have ended without its hook (a retry
                // that failed to start its pipes): the early status could be of the run
                // before it, so the count runs its own.
                Some(repo) => repo
                    .commit_and_count(
                        &worktree,
                        &message,
                        early.as_deref().filter(|_| end != AgentEnd::Error),
                    )
                    .map(Some),
                None => Ok(isolation::count_copy(&ctx.workspace, &worktree)),
            })
            .await
    };
    match counted {
        Ok(Ok(changes)) => data.changes = changes,
        Ok(Err(e)) => data.error = Some(crate::error_chain(&e)),
        Err(e) => data.error = Some(crate::error_chain(&e)),
    }
    if data.changes.is_some_and(|c| c.files > 0)
        && let Some(uri) = keep_patch(&runner, &ctx, &worktree).await
    {
        data.artifacts.push(uri);
    }
    Done::Agent {
        n,
        end,
        data: Box::new(data),
    }
}

fn agent_error(n: usize, mut data: AgentData, why: String) -> Done {
    data.error = Some(why);
    Done::Agent {
        n,
        end: AgentEnd::Error,
        data: Box::new(data),
    }
}

/// Creates attempt `n`'s worktree (or copy) and, for Codex, its private home.
fn isolate(
    ctx: &Context,
    n: usize,
    branch: Option<&str>,
    harness: Harness,
) -> Result<Option<PathBuf>, IsolationError> {
    let worktree = ctx.dir.worktree(n);
    match (&ctx.repo, branch) {
        (Some(repo), Some(branch)) => repo.add_worktree(&worktree, branch)?,
        _ => isolation::copy_tree(&ctx.workspace, &worktree)?,
    }
    if harness != Harness::Codex {
        return Ok(None);
    }
    let state = ctx.dir.state(n).map_err(|e| IsolationError::Io {
        what: "cannot create the harness state of",
        path: ctx.dir.path().join("state"),
        source: std::io::Error::other(e),
    })?;
    let home = state.join("codex-home");
    let user = ctx
        .options
        .child_env("CODEX_HOME")
        .map(PathBuf::from)
        .or_else(|| {
            ctx.options
                .child_env("HOME")
                .map(|h| PathBuf::from(h).join(".codex"))
        });
    isolation::seed_codex_home(user.as_deref(), &home)?;
    Ok(Some(home))
}

#[allow(clippy::too_many_arguments)]
async fn run_auto<R: Runtime>(
    runner: &Runner<R>,
    ctx: &Context,
    n: usize,
    here: &Path,
    codex_home: Option<PathBuf>,
    stop: StopSignal,
    mut progress: impl FnMut(&str) + Send + 'static,
    data: &mut AgentData,
) -> AgentEnd {
    let spec = &ctx.options.attempts[n];
    let mut options =
        AutoSessionOptions::new(spec.harness, ctx.options.prompt.clone()).workspace(here);
    if let Some(m) = &spec.model {
        options = options.model(m);
    }
    for arg in &ctx.options.harness_args {
        options = options.harness_arg(arg);
    }
    if let Some(v) = &ctx.options.verify {
        options = options.verify(v);
    }
    if let Some(t) = ctx.options.max_turns {
        options = options.max_turns(t);
    }
    if let Some(usd) = ctx.options.budget.max_cost_usd {
        options = options.max_cost_usd(usd);
    }
    if let Some(tokens) = ctx.options.budget.max_tokens {
        options = options.max_tokens(tokens);
    }
    if let Some(prices) = &ctx.options.prices {
        options = options.prices(prices.clone());
    }
    let session = match AutoSession::create(runner.clone(), options).await {
        Ok(s) => s,
        Err(e) => {
            data.error = Some(crate::error_chain(&e));
            return AgentEnd::Error;
        }
    };
    let mut session = session.stop_on(StopRequests::new(stop.stream()));
    for (k, v) in &ctx.options.env {
        session = session.env(k, v);
    }
    if let Some(home) = &codex_home {
        session = session.env("CODEX_HOME", home);
    }
    if let Some(t) = ctx.options.timeout {
        session = session.turn_timeout(t);
    }
    if let Some(t) = ctx.options.idle_timeout {
        session = session.idle_timeout(t);
    }
    if let Some(t) = ctx.options.stall_timeout {
        session = session.stall_timeout(t);
    }
    let outcome = match session
        .run(move |p| match p {
            AutoProgress::Event(line) | AutoProgress::Harness(line) => progress(line),
        })
        .await
    {
        Ok(o) => o,
        Err(e) => {
            data.error = Some(crate::error_chain(&e));
            return AgentEnd::Error;
        }
    };
    let state = outcome.state();
    data.usage = state.usage.total().cloned();
    data.session_id = state.harness_session_id.clone();
    data.artifacts = state
        .turns
        .iter()
        .flat_map(|t| t.artifacts.iter().cloned())
        .collect();
    match outcome.end() {
        AutoEnd::Interrupted => AgentEnd::Stopped,
        AutoEnd::Finished if outcome.status() == SessionStatus::Completed => AgentEnd::Succeeded,
        AutoEnd::Finished => AgentEnd::Failed,
        AutoEnd::SpawnFailed { reason, .. } => {
            data.error = Some(reason.clone());
            AgentEnd::Error
        }
        other => {
            data.error = Some(format!("{other:?}"));
            AgentEnd::Error
        }
    }
}

/// Keeps the attempt's whole change (`git diff --binary` against the base, or against the
/// workspace for a private copy) as an artifact, so a removed loser's work is not lost.
async fn keep_patch<R: Runtime>(
    runner: &Runner<R>,
    ctx: &Context,
    worktree: &Path,
) -> Option<String> {
    let options = match &ctx.repo {
        Some(repo) => RunOptions::new("git")
            .args(["diff", "--binary", repo.base.as_str(), "HEAD"])
            .current_dir(worktree),
        None => RunOptions::new("git")
            .args(["diff", "--no-index", "--binary", "--"])
            .arg(&ctx.workspace)
            .arg(worktree),
    }
    .label("fanout patch")
    .timeout(Duration::from_secs(120));
    let result = runner.run(options).await.ok()?;
    let stdout = result.stdout()?;
    (stdout.bytes > 0).then(|| result.record.stream_uri(stdout).to_string())
}

/// Runs the verification with `sh -c` in the attempt's worktree (output retained).
pub(super) async fn verify<R: Runtime>(
    runner: Runner<R>,
    n: usize,
    dir: PathBuf,
    command: String,
    timeout: Option<Duration>,
    stop: StopSignal,
) -> Done {
    let mut options = RunOptions::new("sh")
        .args(["-c", command.as_str()])
        .current_dir(&dir)
        .label(format!("fanout verify {n}"))
        .limits(PreviewLimits {
            tail_lines: 20,
            ..PreviewLimits::default()
        });
    if let Some(t) = timeout {
        options = options.timeout(t);
    }
    match runner.run(options).cancel_on(stop.stream()).await {
        Ok(result) => {
            let stopped = result.outcome == RunOutcome::Cancelled;
            let code = (!stopped).then(|| i32::from(crate::exit::run_exit_code(&result)));
            let end = match code {
                _ if stopped => VerifyEnd::Stopped,
                Some(0) => VerifyEnd::Passed,
                _ => VerifyEnd::Failed,
            };
            Done::Verified {
                n,
                end,
                record: VerificationRecord::new(code, result.model_text(), artifact_uris(&result)),
            }
        }
        Err(e) => Done::Verified {
            n,
            end: VerifyEnd::Failed,
            record: VerificationRecord::new(
                None,
                format!(
                    "the verification could not be run: {}",
                    crate::error_chain(&e)
                ),
                Vec::new(),
            ),
        },
    }
}
