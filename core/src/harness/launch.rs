//! Launching a harness: the [`Invocation`] for a [`LaunchRequest`], the checks on the model
//! and effort that go out as arguments, and how a driver stops it ([`StopSignals`]).
//!
//! Values only: the driver spawns the invocation.

use super::Harness;

impl Harness {
    /// The launch invocation for a prompt with optional model, effort and resume id.
    /// Options a harness has no flag for (effort for Antigravity and Muse) are left out.
    ///
    /// The prompt is data, never a flag or a subcommand: it comes after `--` (Claude Code,
    /// Antigravity, Codex, Muse), joined to its option as `--single=PROMPT` (Grok) or
    /// `--prompt=PROMPT` (Qwen Code, Gemini CLI), or on stdin (OpenCode, pi, and Claude Code and Codex with
    /// [`LaunchRequest::prompt_on_stdin`]), so a
    /// prompt such as `-x`, `--help me`, `help` or `resume` reaches the
    /// model verbatim.
    ///
    /// # Errors
    /// [`LaunchError::InvalidModel`] when the model is empty, starts with `-` (it would be read
    /// as a flag), holds a control character or is longer than 256 characters.
    /// [`LaunchError::InvalidEffort`] when the effort could be read as something else than an
    /// effort: Codex gets it inside a TOML string (`-c model_reasoning_effort="E"`), so it
    /// must be a lowercase word (`[a-z]+`); the others get it as an argument of its own, which
    /// must be a word of lowercase letters, digits, `-` and `_` not starting with `-`.
    /// [`LaunchError::EffortUnsupported`] for an effort to Qwen Code or Gemini CLI, which take
    /// one only from their settings.
    /// [`LaunchError::InvalidResume`] when the resume id is not a [`plausible_session_id`]
    /// (it would be read as a flag or a path), or, for pi, ends in `.jsonl` (pi opens such a
    /// `--session` value as a session file).
    pub fn invocation(self, request: &LaunchRequest) -> Result<Invocation, LaunchError> {
        if let Some(effort) = &request.effort {
            check_effort(self, effort)?;
        }
        if let Some(id) = &request.resume {
            check_resume(self, id)?;
        }
        if let Some(model) = &request.model {
            check_model(self, model)?;
        }
        let mut args: Vec<String> = Vec::new();
        let mut env = Vec::new();
        let mut stdin = Stdin::Null;
        let push = |args: &mut Vec<String>, flag: &str, value: &Option<String>| {
            if let Some(v) = value {
                args.push(flag.to_owned());
                args.push(v.clone());
            }
        };
        let program = match self {
            Harness::Claude => {
                args.extend(
                    ["-p", "--output-format", "stream-json", "--verbose"].map(String::from),
                );
                push(&mut args, "--model", &request.model);
                push(&mut args, "--effort", &request.effort);
                args.extend(request.harness_args.iter().cloned());
                push(&mut args, "--resume", &request.resume);
                if request.prompt_on_stdin {
                    // `claude -p` without a prompt argument reads it from stdin; no `--` is
                    // left dangling after the options.
                    stdin = Stdin::Prompt(request.prompt.clone());
                } else {
                    args.push("--".to_owned());
                    args.push(request.prompt.clone());
                }
                "claude"
            }
            Harness::Grok => {
                args.extend(["--output-format", "streaming-messages-json"].map(String::from));
                push(&mut args, "-m", &request.model);
                push(&mut args, "--reasoning-effort", &request.effort);
                args.extend(request.harness_args.iter().cloned());
                push(&mut args, "-r", &request.resume);
                // `-p, --single <PROMPT>`: joined to the long option with `=`, the prompt is
                // its value even when it starts with `-` (a separate `-p -x` would be read
                // as the flag `-x` by most argument parsers).
                args.push(format!("{GROK_PROMPT_OPTION}{}", request.prompt));
                env.push(("GROK_DISABLE_AUTOUPDATER".to_owned(), "1".to_owned()));
                "grok"
            }
            Harness::Antigravity => {
                args.extend(["-p", "--output-format", "stream-json"].map(String::from));
                push(&mut args, "--model", &request.model);
                args.extend(request.harness_args.iter().cloned());
                push(&mut args, "--conversation", &request.resume);
                args.push("--".to_owned());
                args.push(request.prompt.clone());
                env.push(("AGY_CLI_DISABLE_AUTO_UPDATE".to_owned(), "true".to_owned()));
                "agy"
            }
            Harness::Codex => {
                args.extend(["exec", "--json"].map(String::from));
                if request.skip_git_repo_check {
                    args.push("--skip-git-repo-check".to_owned());
                }
                push(&mut args, "-m", &request.model);
                if let Some(effort) = &request.effort {
                    args.push("-c".to_owned());
                    args.push(format!("model_reasoning_effort=\"{effort}\""));
                }
                args.extend(request.harness_args.iter().cloned());
                if let Some(id) = &request.resume {
                    args.push("resume".to_owned());
                    args.push(id.clone());
                }
                args.push("--".to_owned());
                if request.prompt_on_stdin {
                    // `codex exec -` reads the prompt from stdin.
                    args.push("-".to_owned());
                    stdin = Stdin::Prompt(request.prompt.clone());
                } else {
                    args.push(request.prompt.clone());
                }
                "codex"
            }
            Harness::Muse => {
                args.extend(["exec", "--json"].map(String::from));
                push(&mut args, "--model", &request.model);
                args.extend(request.harness_args.iter().cloned());
                push(&mut args, "--session-id", &request.resume);
                args.push("--".to_owned());
                args.push(request.prompt.clone());
                env.push(("MUSE_NO_AUTO_UPDATE".to_owned(), "1".to_owned()));
                "muse"
            }
            Harness::OpenCode => {
                args.extend(["run", "--format", "json"].map(String::from));
                push(&mut args, "-m", &request.model);
                push(&mut args, "--variant", &request.effort);
                args.extend(request.harness_args.iter().cloned());
                push(&mut args, "-s", &request.resume);
                stdin = Stdin::Prompt(request.prompt.clone());
                env.push(("OPENCODE_DISABLE_AUTOUPDATE".to_owned(), "1".to_owned()));
                "opencode"
            }
            Harness::Qwen => {
                args.extend(["--output-format", "stream-json"].map(String::from));
                push(&mut args, "-m", &request.model);
                args.extend(request.harness_args.iter().cloned());
                push(&mut args, "--resume", &request.resume);
                // Joined to its option, the prompt is its value even when it starts with `-`
                // (Qwen's parser drops a prompt given after `--`).
                args.push(format!("{QWEN_PROMPT_OPTION}{}", request.prompt));
                env.push((
                    "QWEN_USAGE_STATISTICS_ENABLED".to_owned(),
                    "false".to_owned(),
                ));
                "qwen"
            }
            Harness::Pi => {
                args.extend(["--mode", "json"].map(String::from));
                push(&mut args, "--model", &request.model);
                push(&mut args, "--thinking", &request.effort);
                args.extend(request.harness_args.iter().cloned());
                push(&mut args, "--session", &request.resume);
                // pi has no `--`: any argument starting with `-` is an option. `-p` without
                // a message reads the prompt from stdin (pi trims its surrounding
                // whitespace).
                args.push("-p".to_owned());
                stdin = Stdin::Prompt(request.prompt.clone());
                env.push(("PI_SKIP_VERSION_CHECK".to_owned(), "1".to_owned()));
                env.push(("PI_TELEMETRY".to_owned(), "0".to_owned()));
                "pi"
            }
            Harness::Gemini => {
                // `gemini --output-format stream-json [--model M] [ARGS] [--resume ID]
                // --prompt=PROMPT`. Joined to its long option with `=`, the prompt is its
                // value even when it starts with `-` (`--prompt -x` would be read as the flag
                // `-x`); stdin stays null (the CLI appends whatever stdin holds to the
                // prompt). Headless Gemini CLI checks for no update; its usage statistics are
                // a setting only (`privacy.usageStatisticsEnabled` in
                // `~/.gemini/settings.json`).
                args.extend(["--output-format", "stream-json"].map(String::from));
                push(&mut args, "--model", &request.model);
                args.extend(request.harness_args.iter().cloned());
                push(&mut args, "--resume", &request.resume);
                args.push(format!("{GEMINI_PROMPT_OPTION}{}", request.prompt));
                env.push(("GEMINI_TELEMETRY_ENABLED".to_owned(), "false".to_owned()));
                "gemini"
            }
        };
        Ok(Invocation {
            program: program.to_owned(),
            args,
            env,
            stdin,
        })
    }

    /// Whether the harness can read its prompt on stdin (with
    /// [`LaunchRequest::prompt_on_stdin`], or always for OpenCode and pi).
    pub fn reads_prompt_on_stdin(self) -> bool {
        match self {
            Harness::Claude | Harness::Codex | Harness::OpenCode | Harness::Pi => true,
            Harness::Grok
            | Harness::Antigravity
            | Harness::Muse
            | Harness::Qwen
            | Harness::Gemini => false,
        }
    }

    /// How [`Harness::invocation`] delivers the prompt of `request`: on stdin, or as one
    /// argument whose size the system bounds ([`MAX_ARG_BYTES`], less the option Grok, Qwen
    /// Code or Gemini CLI joins it to). A caller with a prompt over that bound (a whole transcript to summarize) either
    /// asks for stdin or treats the prompt as too large, before launching anything.
    pub fn prompt_delivery(self, request: &LaunchRequest) -> PromptDelivery {
        match self {
            Harness::OpenCode | Harness::Pi => PromptDelivery::Stdin,
            Harness::Claude | Harness::Codex if request.prompt_on_stdin => PromptDelivery::Stdin,
            Harness::Grok => PromptDelivery::Argument {
                max_bytes: MAX_ARG_BYTES - GROK_PROMPT_OPTION.len(),
            },
            Harness::Qwen => PromptDelivery::Argument {
                max_bytes: MAX_ARG_BYTES - QWEN_PROMPT_OPTION.len(),
            },
            Harness::Gemini => PromptDelivery::Argument {
                max_bytes: MAX_ARG_BYTES - GEMINI_PROMPT_OPTION.len(),
            },
            Harness::Claude | Harness::Codex | Harness::Antigravity | Harness::Muse => {
                PromptDelivery::Argument {
                    max_bytes: MAX_ARG_BYTES,
                }
            }
        }
    }

    /// How a driver stops this harness: send the signals in order, waiting the driver's grace
    /// period between them, then kill the process group. Codex gets SIGINT first (it ends
    /// its turn and writes its session file on it); the others SIGTERM.
    pub fn stop_signals(self) -> StopSignals {
        match self {
            Harness::Codex => StopSignals {
                sequence: &[StopSignal::Interrupt, StopSignal::Terminate],
            },
            Harness::Claude
            | Harness::Grok
            | Harness::Antigravity
            | Harness::Muse
            | Harness::OpenCode
            | Harness::Qwen
            | Harness::Pi
            | Harness::Gemini => StopSignals {
                sequence: &[StopSignal::Terminate],
            },
        }
    }

    /// The HTTP status an exit code of this harness stands for, when it says one. Gemini CLI
    /// exits with the status of a failed API request modulo 256, so 144 is 400, 173 is 429,
    /// 244 is 500. `None` for the other harnesses, and for codes no 4xx or 5xx status leaves
    /// (a 5xx above 511 wraps to 0–87, which ordinary errors use too).
    pub fn http_status_of_exit(self, code: i32) -> Option<u16> {
        (self == Harness::Gemini && (144..=255).contains(&code))
            .then(|| u16::try_from(code + 256).ok())
            .flatten()
    }
}

/// The longest single argument Linux passes to a program (`MAX_ARG_STRLEN`, 128 KiB with its
/// terminating NUL); a longer one fails the launch with `E2BIG`.
pub const MAX_ARG_BYTES: usize = 128 * 1024 - 1;

/// The option Grok's prompt is joined to, in the same argument.
const GROK_PROMPT_OPTION: &str = "--single=";

/// The option Qwen Code's prompt is joined to, in the same argument.
const QWEN_PROMPT_OPTION: &str = "--prompt=";

/// The option Gemini CLI's prompt is joined to, in the same argument.
const GEMINI_PROMPT_OPTION: &str = "--prompt=";

/// How a harness gets its prompt ([`Harness::prompt_delivery`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum PromptDelivery {
    /// Written to the harness's stdin, then closed: any size.
    Stdin,
    /// As (part of) one command-line argument: at most `max_bytes` bytes of prompt.
    Argument {
        /// The largest prompt, in bytes, that fits the argument.
        max_bytes: usize,
    },
}

impl PromptDelivery {
    /// The largest prompt this delivery takes, in bytes; `None` when unbounded.
    pub fn max_prompt_bytes(self) -> Option<usize> {
        match self {
            PromptDelivery::Stdin => None,
            PromptDelivery::Argument { max_bytes } => Some(max_bytes),
        }
    }
}

/// Longest accepted reasoning effort.
const MAX_EFFORT_CHARS: usize = 64;

/// Whether `effort` can be passed to `harness` without being read as something else.
/// Longest model name accepted, in characters.
const MAX_MODEL_CHARS: usize = 256;

/// A model goes out as the value of its own argument (`--model M`, `-m M`): it must not be
/// readable as a flag, and a model supplied by another model (the MCP `agent` tool) must not
/// smuggle control characters into a harness's argument parser.
fn check_model(harness: Harness, model: &str) -> Result<(), LaunchError> {
    let ok = !model.is_empty()
        && !model.starts_with('-')
        && !model.chars().any(char::is_control)
        && model.chars().count() <= MAX_MODEL_CHARS;
    if ok {
        Ok(())
    } else {
        Err(LaunchError::InvalidModel {
            harness,
            model: model.chars().take(MAX_MODEL_CHARS).collect(),
        })
    }
}

/// Whether a session id may name a file or an argument: letters, digits, `-`, `_`, `.`,
/// `:`, not starting with `-` or `.`, at most 256 bytes (no paths, no options).
pub fn plausible_session_id(id: &str) -> bool {
    !id.is_empty()
        && id.len() <= 256
        && !id.starts_with(['-', '.'])
        && id
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | ':'))
}

/// A resume id goes out as the value of the harness's resume option (or Codex's `resume`
/// subcommand): it must not be readable as a flag or as a path.
fn check_resume(harness: Harness, id: &str) -> Result<(), LaunchError> {
    // pi's `--session` takes a path as well as an id: a value with a path separator or
    // ending in `.jsonl` is opened as a file (the first is already refused above).
    let ok = plausible_session_id(id) && !(harness == Harness::Pi && id.ends_with(".jsonl"));
    if ok {
        Ok(())
    } else {
        Err(LaunchError::InvalidResume {
            harness,
            id: id.chars().take(MAX_RESUME_CHARS).collect(),
        })
    }
}

/// The most characters of a refused resume id kept in its error.
const MAX_RESUME_CHARS: usize = 256;

fn check_effort(harness: Harness, effort: &str) -> Result<(), LaunchError> {
    if matches!(harness, Harness::Qwen | Harness::Gemini) {
        return Err(LaunchError::EffortUnsupported { harness });
    }
    let (ok, expected) = match harness {
        // Codex's effort is interpolated into a TOML string: letters only, so no quote,
        // backslash or newline can end the string early.
        Harness::Codex => (
            !effort.is_empty() && effort.bytes().all(|b| b.is_ascii_lowercase()),
            "expected a lowercase word such as minimal, low, medium, high or xhigh",
        ),
        _ => (
            effort
                .bytes()
                .next()
                .is_some_and(|b| b.is_ascii_lowercase() || b.is_ascii_digit())
                && effort.bytes().all(|b| {
                    b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'_'
                }),
            "expected a word of lowercase letters, digits, '-' and '_' such as low, medium or high",
        ),
    };
    if ok && effort.chars().count() <= MAX_EFFORT_CHARS {
        Ok(())
    } else {
        Err(LaunchError::InvalidEffort {
            harness,
            effort: effort.chars().take(MAX_EFFORT_CHARS).collect(),
            expected,
        })
    }
}

/// Why a [`LaunchRequest`] cannot be turned into an [`Invocation`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum LaunchError {
    /// The model name could be read as a flag, or is not a name at all.
    #[error(
        "invalid model {model:?} for {harness}: expected a model name (not empty, not starting \
         with '-', no control characters, at most 256 characters)"
    )]
    InvalidModel {
        /// The harness.
        harness: Harness,
        /// The model (at most its first 256 characters).
        model: String,
    },
    /// The reasoning effort is not a plain word (it could be read as a flag or break out of
    /// the configuration value it is passed in).
    #[error("invalid reasoning effort {effort:?} for {harness}: {expected}")]
    InvalidEffort {
        /// The harness.
        harness: Harness,
        /// The effort (at most its first 64 characters).
        effort: String,
        /// What is accepted.
        expected: &'static str,
    },
    /// The harness takes no reasoning effort on its command line (Qwen Code, Gemini CLI).
    #[error(
        "{harness} takes no reasoning effort on its command line: set it in its settings \
         (Qwen Code: model.generationConfig.reasoning.effort in ~/.qwen/settings.json; Gemini \
         CLI: a model alias with a thinkingConfig under modelConfigs.customAliases in \
         ~/.gemini/settings.json, chosen with --model ALIAS) and leave the effort out"
    )]
    EffortUnsupported {
        /// The harness.
        harness: Harness,
    },
    /// The resume id could be read as a flag or a path, or is not an id at all.
    #[error(
        "invalid resume id {id:?} for {harness}: expected a session id (letters, digits, '-', \
         '_', '.' and ':', not starting with '-' or '.', at most 256 characters; for pi not \
         ending in .jsonl)"
    )]
    InvalidResume {
        /// The harness.
        harness: Harness,
        /// The resume id (at most its first 256 characters).
        id: String,
    },
}

/// What to launch: a prompt with optional model, effort and resume id.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LaunchRequest {
    /// The prompt.
    pub prompt: String,
    /// The requested model, passed verbatim.
    pub model: Option<String>,
    /// The requested reasoning effort, passed verbatim.
    pub effort: Option<String>,
    /// A session id to resume.
    pub resume: Option<String>,
    /// Arguments passed verbatim after the harness's own flags, before the resume id and
    /// the prompt (e.g. a permission mode, so the agent may edit files non-interactively).
    pub harness_args: Vec<String>,
    /// Codex only: run outside a Git repository (`--skip-git-repo-check`); Codex refuses to
    /// otherwise. Ignored by the other harnesses.
    pub skip_git_repo_check: bool,
    /// Deliver the prompt on stdin wherever the harness can read it there (Claude Code's `-p`
    /// without a prompt argument, Codex's `exec -`; OpenCode always reads it there), so it is
    /// not bound by the size of one argument. The others still get it as their argument; see
    /// [`Harness::prompt_delivery`].
    pub prompt_on_stdin: bool,
}

impl LaunchRequest {
    /// Whether the run may continue an earlier session of `harness`: a resume id, or harness
    /// arguments that resume one behind the request's back (Claude Code's `--continue` or
    /// `--resume`, Codex's `resume`, OpenCode's `--continue` or `--session`, …). When it may,
    /// the harness's running totals must not be taken for the run's own; a false alarm only
    /// labels the run's own figures as running totals.
    pub fn may_resume(&self, harness: Harness) -> bool {
        let flags: &[&str] = match harness {
            Harness::Claude => &["--continue", "-c", "--resume", "-r"],
            Harness::Codex => &["resume", "--last"],
            Harness::OpenCode => &["--continue", "-c", "--session", "-s"],
            Harness::Gemini => &["--resume", "-r", "--session-file"],
            _ => &["--continue", "--resume", "--session", "resume"],
        };
        self.resume.is_some()
            || self.harness_args.iter().any(|arg| {
                let name = arg.split_once('=').map_or(arg.as_str(), |(name, _)| name);
                flags.contains(&name)
            })
    }
}

/// A launch invocation: program, arguments, fixed environment and stdin. Values only: the
/// driver spawns it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Invocation {
    /// Program name, looked up on `PATH` by the driver.
    pub program: String,
    /// Arguments after the program name.
    pub args: Vec<String>,
    /// Fixed environment added to the inherited one.
    pub env: Vec<(String, String)>,
    /// What the child reads on stdin.
    pub stdin: Stdin,
}

impl From<Invocation> for crate::process::RunOptions {
    /// The process options that launch `invocation`: program, arguments, fixed environment
    /// and stdin (the prompt written then closed, or null). Stop signals, timeouts and the
    /// rest stay at their defaults.
    fn from(invocation: Invocation) -> Self {
        let mut options = crate::process::RunOptions::new(&invocation.program)
            .args(&invocation.args)
            .stdin(match invocation.stdin {
                Stdin::Null => crate::process::StdinMode::Null,
                Stdin::Prompt(prompt) => crate::process::StdinMode::Bytes(prompt.into_bytes()),
            });
        for (key, value) in &invocation.env {
            options = options.env(key, value);
        }
        options
    }
}

/// The child's stdin.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Stdin {
    /// `/dev/null`.
    Null,
    /// The prompt, written once and then closed.
    Prompt(String),
}

/// One stop signal, without naming an OS binding (the driver maps it).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum StopSignal {
    /// `SIGINT`: let the CLI finish its session record.
    Interrupt,
    /// `SIGTERM`.
    Terminate,
}

/// The signals a driver sends, in order, before killing the process group.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StopSignals {
    /// The signals, in order.
    pub sequence: &'static [StopSignal],
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::harness::Harness;

    #[test]
    fn a_resume_id_that_could_be_a_flag_or_a_path_is_refused_for_every_harness() {
        for harness in Harness::ALL {
            let resume = |id: &str| {
                harness.invocation(&LaunchRequest {
                    prompt: "p".into(),
                    resume: Some(id.into()),
                    ..LaunchRequest::default()
                })
            };
            for id in ["-x", "--help", "", "a/b", "..\\x", ".hidden", "a b", "x\n"] {
                assert_eq!(
                    resume(id),
                    Err(LaunchError::InvalidResume {
                        harness,
                        id: id.into()
                    }),
                    "{harness} {id:?}"
                );
            }
            let long = "a".repeat(300);
            assert!(
                matches!(resume(&long), Err(LaunchError::InvalidResume { id, .. }) if id.len() == 256),
                "{harness}"
            );
            for id in [
                "ses_abc123",
                "0b7f.e:1",
                "5f0c1f3e-6a3b-4d0e-9a57-2f1d7c7b9e10",
            ] {
                assert!(resume(id).is_ok(), "{harness} {id:?}");
            }
            // Only pi reads a `.jsonl` value as a session file.
            assert_eq!(
                resume("s.jsonl").is_err(),
                harness == Harness::Pi,
                "{harness}"
            );
        }
    }

    fn with_effort(harness: Harness, effort: &str) -> Result<Invocation, LaunchError> {
        harness.invocation(&LaunchRequest {
            prompt: "p".into(),
            effort: Some(effort.into()),
            ..LaunchRequest::default()
        })
    }

    #[test]
    fn codex_accepts_only_a_lowercase_word_as_its_effort() {
        for effort in ["minimal", "low", "high", "xhigh"] {
            let inv = with_effort(Harness::Codex, effort).unwrap();
            assert!(
                inv.args
                    .contains(&format!("model_reasoning_effort=\"{effort}\""))
            );
        }
        for effort in [
            "",
            "high\" model=\"x",
            "high\nmodel = \"x\"",
            "High",
            "x-high",
            "-x",
            "high ",
        ] {
            let err = with_effort(Harness::Codex, effort).unwrap_err();
            let LaunchError::InvalidEffort { harness, .. } = &err else {
                panic!("{err}");
            };
            assert_eq!(*harness, Harness::Codex);
            assert!(err.to_string().contains("lowercase word"), "{err}");
        }
    }

    #[test]
    fn a_model_that_could_be_read_as_a_flag_is_refused() {
        for harness in Harness::ALL {
            let with_model = |model: &str| {
                harness.invocation(&LaunchRequest {
                    prompt: "hi".to_owned(),
                    model: Some(model.to_owned()),
                    ..LaunchRequest::default()
                })
            };
            for model in [
                "claude-sonnet-4-6",
                "gpt-5.1-codex",
                "openai/gpt-4.1",
                "m x",
            ] {
                let invocation = with_model(model).unwrap();
                assert!(
                    invocation.args.iter().any(|a| a == model),
                    "{harness} {model}"
                );
            }
            for model in ["", "-x", "--help", "a\nb", &"m".repeat(257)] {
                let err = with_model(model).unwrap_err();
                assert!(
                    matches!(err, LaunchError::InvalidModel { .. }),
                    "{harness} {model:?}: {err}"
                );
            }
        }
    }

    #[test]
    fn an_effort_that_could_be_read_as_a_flag_is_refused() {
        for harness in [Harness::Claude, Harness::Grok, Harness::OpenCode] {
            for effort in ["max", "xhigh", "thinking-2", "level_3"] {
                assert!(with_effort(harness, effort).is_ok(), "{harness} {effort}");
            }
            for effort in ["", "-x", "--help", "high now", "a\"b", &"a".repeat(65)] {
                let err = with_effort(harness, effort).unwrap_err();
                assert!(
                    err.to_string().starts_with("invalid reasoning effort"),
                    "{err}"
                );
            }
        }
        // The message quotes at most 64 characters of a long effort.
        let err = with_effort(Harness::Claude, &"a".repeat(1000)).unwrap_err();
        assert!(err.to_string().len() < 300, "{err}");
    }

    #[test]
    fn harness_args_that_resume_a_session_are_recognized() {
        let with_args = |args: &[&str]| LaunchRequest {
            harness_args: args.iter().map(|a| (*a).to_owned()).collect(),
            ..LaunchRequest::default()
        };
        let resumed = [
            (Harness::Claude, &["--continue"][..]),
            (
                Harness::Claude,
                &["--permission-mode", "acceptEdits", "-r", "S"],
            ),
            (Harness::Claude, &["--resume=S"]),
            (Harness::Codex, &["resume", "--last"]),
            (Harness::OpenCode, &["--session=ses_1"]),
            (Harness::Muse, &["--resume", "S"]),
        ];
        for (h, args) in resumed {
            assert!(with_args(args).may_resume(h), "{h:?} {args:?}");
        }
        let fresh = [
            (Harness::Claude, &["--permission-mode", "acceptEdits"][..]),
            (
                Harness::Codex,
                &["-c", "model_reasoning_effort=high", "--full-auto"],
            ),
            (Harness::OpenCode, &[]),
        ];
        for (h, args) in fresh {
            assert!(!with_args(args).may_resume(h), "{h:?} {args:?}");
        }
        let by_id = LaunchRequest {
            resume: Some("S".into()),
            ..LaunchRequest::default()
        };
        assert!(by_id.may_resume(Harness::Grok));
    }

    #[test]
    fn grok_gets_the_prompt_joined_to_its_long_option() {
        for prompt in ["-x", "--help", "--help me", "help", "a=b", ""] {
            let inv = Harness::Grok
                .invocation(&LaunchRequest {
                    prompt: prompt.into(),
                    resume: Some("S".into()),
                    ..LaunchRequest::default()
                })
                .unwrap();
            assert_eq!(inv.args.last().unwrap(), &format!("--single={prompt}"));
            assert!(!inv.args.iter().any(|a| a == prompt || a == "-p"));
        }
    }

    #[test]
    fn harness_args_go_after_the_flags_and_before_resume_and_prompt() {
        let request = LaunchRequest {
            prompt: "do it".into(),
            model: Some("m".into()),
            resume: Some("S".into()),
            harness_args: vec!["--permission-mode".into(), "acceptEdits".into()],
            ..LaunchRequest::default()
        };
        for harness in Harness::ALL {
            let inv = harness.invocation(&request).unwrap();
            let at = |s: &str| inv.args.iter().position(|a| a == s);
            let extra = at("--permission-mode").expect("harness args passed");
            assert_eq!(inv.args[extra + 1], "acceptEdits", "{harness}");
            let resume = at("S").expect("resume id passed");
            assert!(extra < resume, "{harness}: {:?}", inv.args);
            if let Some(prompt) = at("do it") {
                assert!(extra < prompt, "{harness}: {:?}", inv.args);
            }
            let model = at("m").expect("model passed");
            assert!(model < extra, "{harness}: {:?}", inv.args);
        }
    }

    fn stdin_text(inv: &Invocation) -> Option<&str> {
        match &inv.stdin {
            Stdin::Prompt(p) => Some(p),
            Stdin::Null => None,
        }
    }

    #[test]
    fn the_prompt_goes_on_stdin_where_the_harness_reads_it_there() {
        let request = LaunchRequest {
            prompt: "THE INPUT".to_owned(),
            model: Some("m".to_owned()),
            prompt_on_stdin: true,
            ..LaunchRequest::default()
        };
        for harness in [Harness::Claude, Harness::Codex, Harness::OpenCode] {
            assert!(harness.reads_prompt_on_stdin());
            assert_eq!(harness.prompt_delivery(&request), PromptDelivery::Stdin);
            let inv = harness.invocation(&request).unwrap();
            assert_eq!(stdin_text(&inv), Some("THE INPUT"), "{harness}");
            assert!(
                !inv.args.iter().any(|a| a.contains("THE INPUT")),
                "{harness}: {:?}",
                inv.args
            );
        }
        let claude = Harness::Claude.invocation(&request).unwrap();
        assert_ne!(claude.args.last().map(String::as_str), Some("--"));
        let codex = Harness::Codex.invocation(&request).unwrap();
        assert_eq!(codex.args.last().map(String::as_str), Some("-"));
        // The others take it as their prompt argument, bounded by one argument's size.
        for harness in [Harness::Grok, Harness::Antigravity, Harness::Muse] {
            assert!(!harness.reads_prompt_on_stdin());
            let inv = harness.invocation(&request).unwrap();
            let prompt = match harness {
                Harness::Grok => "--single=THE INPUT",
                _ => "THE INPUT",
            };
            assert!(inv.args.iter().any(|a| a == prompt), "{harness}");
            assert_eq!(stdin_text(&inv), None);
            let max = harness
                .prompt_delivery(&request)
                .max_prompt_bytes()
                .unwrap();
            let joined = if harness == Harness::Grok {
                "--single=".len()
            } else {
                0
            };
            assert_eq!(max + joined, MAX_ARG_BYTES, "{harness}");
        }
    }

    #[test]
    fn without_stdin_delivery_the_prompt_is_an_argument_after_the_separator() {
        let request = LaunchRequest {
            prompt: "-x".to_owned(),
            ..LaunchRequest::default()
        };
        for harness in [Harness::Claude, Harness::Codex] {
            let inv = harness.invocation(&request).unwrap();
            assert_eq!(inv.args[inv.args.len() - 2..], ["--", "-x"], "{harness}");
            assert_eq!(stdin_text(&inv), None);
            assert_eq!(
                harness.prompt_delivery(&request),
                PromptDelivery::Argument {
                    max_bytes: MAX_ARG_BYTES
                }
            );
        }
    }

    #[test]
    fn gemini_gets_the_prompt_joined_to_its_option_and_refuses_an_effort() {
        for prompt in ["-x", "--help me", "help", "a=b", ""] {
            let inv = Harness::Gemini
                .invocation(&LaunchRequest {
                    prompt: prompt.into(),
                    model: Some("gemini-2.5-flash".into()),
                    resume: Some("S".into()),
                    harness_args: vec!["--approval-mode".into(), "yolo".into()],
                    ..LaunchRequest::default()
                })
                .unwrap();
            assert_eq!(inv.program, "gemini");
            assert_eq!(
                inv.args,
                [
                    "--output-format",
                    "stream-json",
                    "--model",
                    "gemini-2.5-flash",
                    "--approval-mode",
                    "yolo",
                    "--resume",
                    "S",
                    &format!("--prompt={prompt}"),
                ]
            );
            assert_eq!(inv.stdin, Stdin::Null);
            assert_eq!(
                inv.env,
                [("GEMINI_TELEMETRY_ENABLED".to_owned(), "false".to_owned())]
            );
        }
        let err = Harness::Gemini
            .invocation(&LaunchRequest {
                prompt: "p".into(),
                effort: Some("high".into()),
                ..LaunchRequest::default()
            })
            .unwrap_err();
        assert!(
            matches!(err, LaunchError::EffortUnsupported { .. }),
            "{err}"
        );
        assert!(err.to_string().contains("~/.gemini/settings.json"), "{err}");
        // The prompt is an argument, bounded by one argument's size less its option.
        let request = LaunchRequest {
            prompt: "p".into(),
            prompt_on_stdin: true,
            ..LaunchRequest::default()
        };
        assert!(!Harness::Gemini.reads_prompt_on_stdin());
        assert_eq!(
            Harness::Gemini.prompt_delivery(&request),
            PromptDelivery::Argument {
                max_bytes: MAX_ARG_BYTES - "--prompt=".len()
            }
        );
        assert_eq!(
            stdin_text(&Harness::Gemini.invocation(&request).unwrap()),
            None
        );
        let with_args = |args: &[&str]| LaunchRequest {
            harness_args: args.iter().map(|a| (*a).to_owned()).collect(),
            ..LaunchRequest::default()
        };
        for args in [
            &["-r", "latest"][..],
            &["--resume=3"],
            &["--session-file", "f"],
        ] {
            assert!(with_args(args).may_resume(Harness::Gemini), "{args:?}");
        }
        assert!(!with_args(&["--approval-mode", "yolo"]).may_resume(Harness::Gemini));
    }

    #[test]
    fn exit_codes_name_the_http_status_they_stand_for() {
        let gemini = Harness::Gemini;
        assert_eq!(gemini.http_status_of_exit(144), Some(400));
        assert_eq!(gemini.http_status_of_exit(173), Some(429));
        assert_eq!(gemini.http_status_of_exit(244), Some(500));
        for code in [0, 1, 41, 42, 52, 130, 143, 256, -1] {
            assert_eq!(gemini.http_status_of_exit(code), None, "{code}");
        }
        assert_eq!(Harness::Claude.http_status_of_exit(144), None);
    }
}
