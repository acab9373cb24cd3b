//! The real agent CLIs for end-to-end tests, and the environment that runs them offline
//! against a [`ModelServer`](crate::model_server::ModelServer).
//!
//! [`executable`] returns the path of a pinned CLI, running `scripts/install-agent-clis.sh`
//! (npm, into a cache under `~/.cache/agentrun/agent-clis`, or `$AGENTRUN_AGENT_CLIS`) the
//! first time; later calls take milliseconds. A missing CLI that cannot be installed is a test
//! failure, never a skip.
//!
//! [`claude_env`] writes a private home and returns the complete environment for running
//! Claude Code offline. Use it with `Command::env_clear().envs(…)` so nothing of the
//! developer's own setup (API keys, config dirs, proxies) leaks in:
//!
//! * `HOME`, `CLAUDE_CONFIG_DIR` and the temporary folder (`TMPDIR`, `CLAUDE_CODE_TMPDIR`)
//!   inside the given directory, with a `settings.json` in the config directory that
//!   allows the `Bash`, `Write`, `Edit` and `Read` tools (non-interactive runs otherwise deny
//!   them);
//! * `ANTHROPIC_BASE_URL` = the server, `ANTHROPIC_API_KEY` a dummy key (no login);
//! * `CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1` (no update check, telemetry, error reports
//!   or feature flags: with it the CLI connects to the model server only), plus
//!   `DISABLE_AUTOUPDATER`, `DISABLE_TELEMETRY`, `DISABLE_ERROR_REPORTING`;
//! * `CLAUDE_CODE_MAX_RETRIES=0`, so a scripted 429/500 is reported at once instead of after
//!   minutes of back-off (override it in the returned list to test retries);
//! * `PATH` with the CLI's directory first.
//!
//! [`codex_env`] does the same for Codex: `HOME` and `CODEX_HOME` inside the directory, with a
//! `config.toml` whose model provider points at the server (`wire_api = "responses"`, no
//! retries), the `workspace-write` sandbox and `approval_policy = "never"` (tool calls run
//! without asking), and update checks, plugins (they fetch catalogs) and analytics off.
//!
//! [`opencode_env`] for OpenCode: `HOME` and the XDG directories inside the directory, with an
//! `opencode.json` custom provider `agentrun-test` (`@ai-sdk/openai-compatible`, `baseURL` =
//! the server) and its model `test-model` (so `-m agentrun-test/test-model`), every tool
//! allowed, the title generator off (it would send an extra model request), and
//! `OPENCODE_DISABLE_*` switches for updates, model catalog fetches, default plugins, LSP
//! downloads, sharing and auto-compaction. OpenCode also installs a plugin package from npm at
//! start-up; `npm_config_registry` points it at a closed port on 127.0.0.1 so it fails at once
//! instead of reaching the registry.
//!
//! [`qwen_env`] for Qwen Code: `HOME` inside the directory, with a `~/.qwen/settings.json`
//! that selects the OpenAI-compatible auth (`security.auth.selectedType = "openai"`), turns
//! auto-update, telemetry and usage statistics off, and turns the managed auto-memory off
//! (otherwise every run makes a second, hidden model request); `OPENAI_BASE_URL` = the
//! server's `/v1`, `OPENAI_API_KEY` a dummy key, `OPENAI_MODEL` [`QWEN_TEST_MODEL`], and
//! `PATH` with the CLI's directory first: it holds the Node 22 the CLI needs (the install
//! script installs it beside the CLI).
//!
//! [`pi_env`] for pi: `HOME` inside the directory, with `~/.pi/agent/models.json` defining
//! the provider `agentrun-test` (`api: "openai-completions"`, `baseUrl` = the server's `/v1`)
//! and its model `test-model` priced at 10/20 dollars per million input/output tokens (1 per
//! million cache reads), `settings.json` making it the default, and `PI_OFFLINE=1` (no
//! start-up network operations).
//! [`gemini_env`] for Gemini CLI: `HOME` and `TMPDIR` inside the directory (the CLI writes
//! error reports to the temporary folder), `GEMINI_API_KEY` a dummy key,
//! `GOOGLE_GEMINI_BASE_URL` = the server, `GEMINI_TELEMETRY_ENABLED=false`,
//! `GEMINI_CLI_TRUST_WORKSPACE=true` (headless mode refuses an untrusted folder), and a
//! `~/.gemini/settings.json` selecting API-key auth (`security.auth.selectedType =
//! "gemini-api-key"`), with auto-update, usage statistics, telemetry and the IDE integration
//! off and at most [`GEMINI_MAX_ATTEMPTS`] attempts per model request (its own default, 10,
//! backs off for minutes before it reports a persistent 5xx). With these it connects to
//! nothing but the model server.

use std::io;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Mutex, OnceLock};

use crate::model_server::{Api, ModelServer, Reply};
use serde_json::json;

/// One of the agent CLIs the tests install.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum AgentCli {
    /// `@anthropic-ai/claude-code` (`claude`).
    Claude,
    /// `@openai/codex` (`codex`).
    Codex,
    /// `opencode-ai` (`opencode`).
    OpenCode,
    /// `@qwen-code/qwen-code` (`qwen`), with Node 22.
    Qwen,
    /// `@mariozechner/pi-coding-agent` (`pi`).
    Pi,
    /// `@google/gemini-cli` (`gemini`).
    Gemini,
}

impl AgentCli {
    /// The name the install script and `PATH` know it by.
    pub fn name(self) -> &'static str {
        match self {
            AgentCli::Claude => "claude",
            AgentCli::Codex => "codex",
            AgentCli::OpenCode => "opencode",
            AgentCli::Qwen => "qwen",
            AgentCli::Pi => "pi",
            AgentCli::Gemini => "gemini",
        }
    }
}

impl AgentCli {
    /// The model API the CLI speaks to the scripted server.
    pub fn api(self) -> Api {
        match self {
            AgentCli::Claude => Api::AnthropicMessages,
            AgentCli::Codex => Api::OpenAiResponses,
            AgentCli::OpenCode | AgentCli::Qwen | AgentCli::Pi => Api::OpenAiChat,
            AgentCli::Gemini => Api::Gemini,
        }
    }

    /// A call of the CLI's shell tool (Claude Code `Bash`, Codex `exec_command`, OpenCode
    /// and pi `bash`, Qwen Code `run_shell_command`) running `echo made > made.txt && echo wrote`.
    pub fn shell_call(self) -> Reply {
        let command = "echo made > made.txt && echo wrote";
        match self {
            AgentCli::Claude => {
                Reply::tool_call("Bash", json!({"command": command, "description": "w"}))
            }
            AgentCli::Codex => Reply::tool_call("exec_command", json!({"cmd": command})),
            AgentCli::OpenCode => {
                Reply::tool_call("bash", json!({"command": command, "description": "w"}))
            }
            AgentCli::Qwen => Reply::tool_call("run_shell_command", json!({"command": command})),
            AgentCli::Pi => Reply::tool_call("bash", json!({"command": command})),
            AgentCli::Gemini => Reply::tool_call("run_shell_command", json!({"command": command})),
        }
    }

    /// An API error the CLI reports after one attempt. Claude Code and Codex run with
    /// retries off here, so an HTTP 500 is final; OpenCode retries 429 and 5xx five times
    /// whatever it is told, so it gets an error it never retries: HTTP 401, a rejected key.
    /// Qwen Code, pi and Gemini CLI retry 429 and 5xx for a long time too: they get an HTTP
    /// 400.
    pub fn final_error(self) -> Reply {
        match self {
            AgentCli::Gemini => Reply::error(400, "invalid_request_error", "Invalid request"),
            AgentCli::Qwen | AgentCli::Pi => Reply::error(
                400,
                "invalid_request_error",
                "Invalid value for 'messages': the request was rejected",
            ),
            AgentCli::OpenCode => Reply::error(
                401,
                "invalid_request_error",
                "Incorrect API key provided: sk-offline-test",
            ),
            AgentCli::Claude | AgentCli::Codex => Reply::server_error(),
        }
    }
}

/// The install script, from this crate's manifest directory.
pub fn install_script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("..")
        .join("scripts")
        .join("install-agent-clis.sh")
}

/// The absolute path of `cli`'s executable, installing it first when missing.
///
/// # Panics
/// When the install script fails (no npm, no registry): the tests that need the CLI cannot
/// run, and say why.
pub fn executable(cli: AgentCli) -> PathBuf {
    static PATHS: OnceLock<Mutex<Vec<(AgentCli, PathBuf)>>> = OnceLock::new();
    let paths = PATHS.get_or_init(|| Mutex::new(Vec::new()));
    let mut paths = paths.lock().unwrap_or_else(|p| p.into_inner());
    if let Some((_, path)) = paths.iter().find(|(c, _)| *c == cli) {
        return path.clone();
    }
    let script = install_script();
    let output = Command::new("bash")
        .arg(&script)
        .arg("--print-path")
        .arg(cli.name())
        .output()
        .unwrap_or_else(|e| panic!("cannot run {}: {e}", script.display()));
    assert!(
        output.status.success(),
        "{} {} failed ({}):\n{}",
        script.display(),
        cli.name(),
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    let path = PathBuf::from(String::from_utf8_lossy(&output.stdout).trim());
    assert!(
        path.is_absolute() && path.exists(),
        "{} printed no executable for {}: {:?}",
        script.display(),
        cli.name(),
        path
    );
    paths.push((cli, path.clone()));
    path
}

/// The directory holding `cli`'s executable (for `PATH`).
pub fn bin_dir(cli: AgentCli) -> PathBuf {
    let exe = executable(cli);
    exe.parent().map(Path::to_path_buf).unwrap_or(exe)
}

/// The CLI's version as it reports it (`claude --version` → `2.1.332`): the first token that
/// starts with a digit, on stdout, or on stderr where pi prints it.
pub fn version(cli: AgentCli) -> String {
    let exe = executable(cli);
    let output = Command::new(&exe)
        .arg("--version")
        .env("HOME", std::env::temp_dir())
        // The CLI's own directory first: Qwen Code's Node 22 is there.
        .env("PATH", path_with(&[bin_dir(cli)]))
        // pi otherwise starts with network operations (a version check), which hang offline.
        .env("PI_OFFLINE", "1")
        .env("PI_SKIP_VERSION_CHECK", "1")
        .output()
        .unwrap_or_else(|e| panic!("cannot run {} --version: {e}", exe.display()));
    let mut text = String::from_utf8_lossy(&output.stdout).into_owned();
    text.push('\n');
    text.push_str(&String::from_utf8_lossy(&output.stderr));
    text.split_whitespace()
        .find(|w| w.starts_with(|c: char| c.is_ascii_digit()))
        .unwrap_or_else(|| panic!("{} --version printed no version: {text:?}", exe.display()))
        .to_owned()
}

/// `PATH` with `dirs` first, then the system directories (node lives there).
pub fn path_with(dirs: &[PathBuf]) -> String {
    let mut parts: Vec<String> = dirs.iter().map(|d| d.display().to_string()).collect();
    parts.extend(["/usr/local/bin", "/usr/bin", "/bin"].map(String::from));
    parts.join(":")
}

/// The environment that runs Claude Code offline against `server` (see the module docs),
/// with its home and config under `home` (created when missing).
pub fn claude_env(home: &Path, server: &ModelServer) -> io::Result<Vec<(String, String)>> {
    let config = home.join(".claude");
    std::fs::create_dir_all(&config)?;
    std::fs::write(
        config.join("settings.json"),
        r#"{"permissions":{"allow":["Bash","Write","Edit","Read"]}}"#,
    )?;
    // Claude Code keeps a directory per working directory (and its sockets) in its temporary
    // folder and never removes them: keep them inside the test's home, which the test removes.
    let tmp = home.join("tmp");
    std::fs::create_dir_all(&tmp)?;
    let vars = [
        ("PATH", path_with(&[bin_dir(AgentCli::Claude)])),
        ("HOME", home.display().to_string()),
        ("TMPDIR", tmp.display().to_string()),
        ("CLAUDE_CODE_TMPDIR", tmp.display().to_string()),
        ("CLAUDE_CONFIG_DIR", config.display().to_string()),
        ("ANTHROPIC_BASE_URL", server.url()),
        ("ANTHROPIC_API_KEY", "sk-ant-offline-test".to_owned()),
        ("CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "1".to_owned()),
        ("DISABLE_AUTOUPDATER", "1".to_owned()),
        ("DISABLE_TELEMETRY", "1".to_owned()),
        ("DISABLE_ERROR_REPORTING", "1".to_owned()),
        ("CLAUDE_CODE_MAX_RETRIES", "0".to_owned()),
    ];
    Ok(vars.into_iter().map(|(k, v)| (k.to_owned(), v)).collect())
}

/// The model `opencode_env` defines (`provider/model`).
pub const OPENCODE_TEST_MODEL: &str = "agentrun-test/test-model";

/// The environment that runs Codex offline against `server` (see the module docs), with its
/// home under `home` (created when missing). `model` is Codex's default model.
pub fn codex_env(
    home: &Path,
    server: &ModelServer,
    model: &str,
) -> io::Result<Vec<(String, String)>> {
    let codex_home = home.join(".codex");
    std::fs::create_dir_all(&codex_home)?;
    let config = format!(
        r#"model = "{model}"
model_provider = "agentrun-test"
check_for_update_on_startup = false
sandbox_mode = "workspace-write"
approval_policy = "never"

[features]
plugins = false

[analytics]
enabled = false

[model_providers.agentrun-test]
name = "agentrun test server"
base_url = "{url}/v1"
wire_api = "responses"
request_max_retries = 0
stream_max_retries = 0
"#,
        url = server.url()
    );
    std::fs::write(codex_home.join("config.toml"), config)?;
    let vars = [
        ("PATH", path_with(&[bin_dir(AgentCli::Codex)])),
        ("HOME", home.display().to_string()),
        ("CODEX_HOME", codex_home.display().to_string()),
    ];
    Ok(vars.into_iter().map(|(k, v)| (k.to_owned(), v)).collect())
}

/// The environment that runs OpenCode offline against `server` (see the module docs), with
/// its home under `home` (created when missing).
pub fn opencode_env(home: &Path, server: &ModelServer) -> io::Result<Vec<(String, String)>> {
    let config_dir = home.join(".config").join("opencode");
    std::fs::create_dir_all(&config_dir)?;
    let config = format!(
        r#"{{
  "provider": {{
    "agentrun-test": {{
      "npm": "@ai-sdk/openai-compatible",
      "name": "agentrun test server",
      "options": {{ "baseURL": "{url}/v1", "apiKey": "sk-offline-test" }},
      "models": {{ "test-model": {{ "name": "test model", "cost": {{ "input": 10, "output": 20 }} }} }}
    }}
  }},
  "model": "{OPENCODE_TEST_MODEL}",
  "autoupdate": false,
  "share": "disabled",
  "agent": {{ "title": {{ "disable": true }} }},
  "permission": {{ "bash": "allow", "edit": "allow", "webfetch": "allow" }}
}}
"#,
        url = server.url()
    );
    std::fs::write(config_dir.join("opencode.json"), config)?;
    // OpenCode's runtime unpacks a native library (5 MiB) into the temporary directory on
    // every start and leaves it there: keep it inside the test's home, which the test removes.
    std::fs::create_dir_all(home.join("tmp"))?;
    let dir = |sub: &str| home.join(sub).display().to_string();
    let vars = [
        ("PATH", path_with(&[bin_dir(AgentCli::OpenCode)])),
        ("HOME", home.display().to_string()),
        ("TMPDIR", dir("tmp")),
        ("XDG_CONFIG_HOME", dir(".config")),
        ("XDG_DATA_HOME", dir(".local/share")),
        ("XDG_CACHE_HOME", dir(".cache")),
        ("XDG_STATE_HOME", dir(".local/state")),
        ("OPENCODE_DISABLE_AUTOUPDATE", "1".to_owned()),
        ("OPENCODE_DISABLE_MODELS_FETCH", "1".to_owned()),
        ("OPENCODE_DISABLE_DEFAULT_PLUGINS", "1".to_owned()),
        ("OPENCODE_DISABLE_LSP_DOWNLOAD", "1".to_owned()),
        ("OPENCODE_DISABLE_SHARE", "1".to_owned()),
        ("OPENCODE_DISABLE_AUTOCOMPACT", "1".to_owned()),
        ("npm_config_registry", "http://127.0.0.1:9/".to_owned()),
    ];
    Ok(vars.into_iter().map(|(k, v)| (k.to_owned(), v)).collect())
}

/// The model `qwen_env` makes Qwen Code request.
pub const QWEN_TEST_MODEL: &str = "test-model";

/// The environment that runs Qwen Code offline against `server` (see the module docs), with
/// its home under `home` (created when missing).
pub fn qwen_env(home: &Path, server: &ModelServer) -> io::Result<Vec<(String, String)>> {
    let config = home.join(".qwen");
    std::fs::create_dir_all(&config)?;
    let settings = json!({
        "security": {"auth": {"selectedType": "openai"}},
        "general": {"disableAutoUpdate": true, "disableUpdateNag": true},
        "telemetry": {"enabled": false},
        "privacy": {"usageStatisticsEnabled": false},
        "memory": {"enableManagedAutoMemory": false},
    });
    std::fs::write(config.join("settings.json"), settings.to_string())?;
    let vars = [
        ("PATH", path_with(&[bin_dir(AgentCli::Qwen)])),
        ("HOME", home.display().to_string()),
        ("OPENAI_BASE_URL", format!("{}/v1", server.url())),
        ("OPENAI_API_KEY", "sk-offline-test".to_owned()),
        ("OPENAI_MODEL", QWEN_TEST_MODEL.to_owned()),
        ("QWEN_USAGE_STATISTICS_ENABLED", "false".to_owned()),
        // The notice on stderr that every tool call runs unsandboxed under yolo.
        ("QWEN_CODE_SUPPRESS_YOLO_WARNING", "1".to_owned()),
    ];
    Ok(vars.into_iter().map(|(k, v)| (k.to_owned(), v)).collect())
}

/// The model `pi_env` defines (`provider/model`).
pub const PI_TEST_MODEL: &str = "agentrun-test/test-model";

/// The environment that runs pi offline against `server` (see the module docs), with its home
/// under `home` (created when missing).
pub fn pi_env(home: &Path, server: &ModelServer) -> io::Result<Vec<(String, String)>> {
    let agent = home.join(".pi").join("agent");
    std::fs::create_dir_all(&agent)?;
    let models = json!({"providers": {"agentrun-test": {
        "baseUrl": format!("{}/v1", server.url()),
        "api": "openai-completions",
        "apiKey": "sk-offline-test",
        "models": [{
            "id": "test-model",
            "name": "test model",
            "reasoning": false,
            "input": ["text"],
            "contextWindow": 128000,
            "maxTokens": 4096,
            "cost": {"input": 10, "output": 20, "cacheRead": 1, "cacheWrite": 0},
        }],
    }}});
    std::fs::write(agent.join("models.json"), models.to_string())?;
    let settings = json!({"defaultProvider": "agentrun-test", "defaultModel": "test-model"});
    std::fs::write(agent.join("settings.json"), settings.to_string())?;
    let vars = [
        ("PATH", path_with(&[bin_dir(AgentCli::Pi)])),
        ("HOME", home.display().to_string()),
        ("PI_OFFLINE", "1".to_owned()),
        ("PI_SKIP_VERSION_CHECK", "1".to_owned()),
        ("PI_TELEMETRY", "0".to_owned()),
    ];
    Ok(vars.into_iter().map(|(k, v)| (k.to_owned(), v)).collect())
}

/// How many attempts [`gemini_env`] lets Gemini CLI make per model request (`general.maxAttempts`):
/// one retry after a 429 or 5xx (about 5 s of back-off), then it reports the error.
pub const GEMINI_MAX_ATTEMPTS: u32 = 2;

/// The environment that runs Gemini CLI offline against `server` (see the module docs), with
/// its home under `home` (created when missing).
pub fn gemini_env(home: &Path, server: &ModelServer) -> io::Result<Vec<(String, String)>> {
    let config = home.join(".gemini");
    std::fs::create_dir_all(&config)?;
    let settings = json!({
        "security": {"auth": {"selectedType": "gemini-api-key"}},
        "general": {
            "enableAutoUpdate": false,
            "enableAutoUpdateNotification": false,
            "maxAttempts": GEMINI_MAX_ATTEMPTS,
        },
        "privacy": {"usageStatisticsEnabled": false},
        "telemetry": {"enabled": false},
        "ide": {"enabled": false},
    });
    std::fs::write(config.join("settings.json"), settings.to_string())?;
    let tmp = home.join("tmp");
    std::fs::create_dir_all(&tmp)?;
    let vars = [
        ("PATH", path_with(&[bin_dir(AgentCli::Gemini)])),
        ("HOME", home.display().to_string()),
        ("TMPDIR", tmp.display().to_string()),
        ("GEMINI_API_KEY", "gemini-offline-test".to_owned()),
        ("GOOGLE_GEMINI_BASE_URL", server.url()),
        ("GEMINI_TELEMETRY_ENABLED", "false".to_owned()),
        ("GEMINI_CLI_TRUST_WORKSPACE", "true".to_owned()),
    ];
    Ok(vars.into_iter().map(|(k, v)| (k.to_owned(), v)).collect())
}
