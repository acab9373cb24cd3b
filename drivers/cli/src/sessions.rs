//! `agentrun sessions` (the auto-mode sessions in the store) and the session half of
//! `agentrun show`: a session's turns, each with the `agentrun read` commands of its output.

use std::io;
use std::process::ExitCode;

use agentrun_core::auto_mode::AutoModeState;
use agentrun_fs::auto_session::SESSIONS_DIR;
use agentrun_fs::{SessionDir, Store};
use clap::Args;

use crate::failure::{Failure, write_or_quiet};
use crate::settings::Settings;

/// Arguments of `agentrun sessions`.
#[derive(Debug, Args)]
pub(crate) struct SessionsArgs {
    /// Print a JSON array of `{"session_id", "status", "turns", "objective",
    /// "updated_unix_ms"}`, newest first.
    #[arg(long)]
    pub(crate) json: bool,
}

/// The state of session `id` in the store's `sessions/`.
pub(crate) fn state(store: &Store, id: &str) -> Result<AutoModeState, Failure> {
    let dir =
        SessionDir::open(store.root().join(SESSIONS_DIR).join(id)).map_err(Failure::runtime)?;
    dir.read_state().map_err(Failure::runtime)
}

/// `agentrun sessions`: the auto-mode sessions in the store, newest first.
pub(crate) fn sessions(settings: &Settings, args: SessionsArgs) -> Result<ExitCode, Failure> {
    let mut out = io::stdout().lock();
    // As `runs`: a store that does not exist has no sessions.
    let Some(store) = settings.existing_store()? else {
        if args.json {
            write_or_quiet(&mut out, b"[]\n")?;
        } else {
            say!(
                "agentrun: no sessions yet: there is no store at {}",
                settings.store_root()?.value.display()
            );
        }
        return Ok(ExitCode::SUCCESS);
    };
    let ids = store.session_ids().map_err(Failure::runtime)?;
    let mut states = Vec::new();
    let mut unreadable = 0;
    for id in ids.iter().rev() {
        match state(&store, id) {
            Ok(s) => states.push(s),
            Err(f) => {
                unreadable += 1;
                say!("agentrun: error: cannot list session {id}: {}", f.message);
            }
        }
    }
    if args.json {
        #[derive(serde::Serialize)]
        struct Row<'a> {
            session_id: &'a str,
            status: &'a str,
            turns: u32,
            objective: &'a str,
            updated_unix_ms: u64,
        }
        let list: Vec<Row<'_>> = states
            .iter()
            .map(|s| Row {
                session_id: &s.session_id,
                status: s.status.as_str(),
                turns: s.turn,
                objective: &s.settings.objective,
                updated_unix_ms: s.updated_unix_ms,
            })
            .collect();
        write_or_quiet(&mut out, crate::json_out::document(&list)?.as_bytes())?;
    } else if states.is_empty() {
        if unreadable == 0 {
            say!("agentrun: no auto sessions in {}", store.root().display());
        }
    } else {
        let mut rows = vec![[
            "SESSION ID".to_owned(),
            "STATUS".to_owned(),
            "TURNS".to_owned(),
            "UPDATED (UTC)".to_owned(),
            "OBJECTIVE".to_owned(),
        ]];
        for s in &states {
            rows.push([
                s.session_id.clone(),
                s.status.as_str().to_owned(),
                s.turn.to_string(),
                crate::store_cmds::utc(
                    std::time::UNIX_EPOCH + std::time::Duration::from_millis(s.updated_unix_ms),
                ),
                one_line(&s.settings.objective, 60),
            ]);
        }
        write_or_quiet(&mut out, table(&rows).as_bytes())?;
        say!("agentrun: `agentrun show SESSION_ID` shows a session's turns");
    }
    Ok(if unreadable == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(crate::failure::FAILED)
    })
}

/// The first line of `text`, cut after `max` characters (`…` marks a cut).
fn one_line(text: &str, max: usize) -> String {
    let first = text.lines().next().unwrap_or("");
    let cut = first.char_indices().nth(max).map(|(i, _)| i);
    match cut {
        Some(i) => format!("{}…", &first[..i]),
        None if first.len() < text.trim_end().len() => format!("{first}…"),
        None => first.to_owned(),
    }
}

/// The session's header: id, status, turns, objective.
pub(crate) fn header(state: &AutoModeState) -> String {
    let verified = match (state.status.as_str(), state.verified) {
        ("completed", Some(true)) => " (verified)",
        ("completed", Some(false)) => " (no verification configured)",
        _ => "",
    };
    let mut s = format!(
        "session {}: {}{verified}, turn {} of at most {}, exit code {}\n",
        state.session_id,
        state.status.as_str(),
        state.turn,
        state.settings.max_turns,
        state.exit_code
    );
    s.push_str(&format!(
        "objective: {}\n",
        one_line(&state.settings.objective, 200)
    ));
    if let Some(reason) = &state.abort {
        s.push_str(&format!("aborted: {reason}\n"));
    }
    s
}

/// The header, then each turn (phase, exit code, verdict) and each verification, each with
/// the `agentrun read` commands of its retained output.
pub(crate) fn render(state: &AutoModeState) -> String {
    let mut s = header(state);
    if state.turns_dropped > 0 {
        s.push_str(&format!(
            "({} older turn records are not kept)\n",
            state.turns_dropped
        ));
    }
    let code = |c: Option<i32>| c.map_or("exit unknown".to_owned(), |c| format!("exit {c}"));
    let mut verifications = state.verifications.iter().peekable();
    for t in &state.turns {
        let verdict = t
            .verdict
            .map_or(String::new(), |v| format!(", verdict {}", v.as_str()));
        s.push_str(&format!(
            "turn {} {}: {}{verdict}\n",
            t.turn,
            t.phase.as_str(),
            code(t.exit_code)
        ));
        for a in &t.artifacts {
            s.push_str(&format!("  agentrun read {a}\n"));
        }
        // A verification checks the claim of the turn it names: shown after that turn's
        // evaluation.
        while let Some(v) = verifications
            .next_if(|v| v.turn == t.turn && t.phase == agentrun_core::auto_mode::Phase::Evaluate)
        {
            push_verification(&mut s, v, &code);
        }
    }
    for v in verifications {
        push_verification(&mut s, v, &code);
    }
    s
}

fn push_verification(
    s: &mut String,
    v: &agentrun_core::auto_mode::VerificationRecord,
    code: &dyn Fn(Option<i32>) -> String,
) {
    s.push_str(&format!(
        "verification of turn {}: {}: {}\n",
        v.turn,
        v.command,
        code(v.exit_code)
    ));
    for a in &v.artifacts {
        s.push_str(&format!("  agentrun read {a}\n"));
    }
}

/// `agentrun show SESSION`: the session's turns on stdout (`--json`: its state).
pub(crate) fn show(store: &Store, id: &str, json: bool) -> Result<ExitCode, Failure> {
    let state = state(store, id)?;
    let mut out = io::stdout().lock();
    if json {
        write_or_quiet(&mut out, crate::json_out::document(&state)?.as_bytes())?;
    } else {
        write_or_quiet(&mut out, render(&state).as_bytes())?;
    }
    Ok(ExitCode::SUCCESS)
}

/// Rows as left-aligned columns two spaces apart (the last column unpadded).
pub(crate) fn table<const N: usize>(rows: &[[String; N]]) -> String {
    let mut widths = [0usize; N];
    for row in rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let mut text = String::new();
    for row in rows {
        let mut line = String::new();
        for (i, (cell, w)) in row.iter().zip(widths).enumerate() {
            if i + 1 == N {
                line.push_str(cell);
            } else {
                line.push_str(&format!("{cell:<w$}  "));
            }
        }
        text.push_str(line.trim_end());
        text.push('\n');
    }
    text
}
