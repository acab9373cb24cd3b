//! The effective settings: command-line flags over environment variables over the config file
//! over the defaults, each value remembering where it came from (`agentrun config` prints
//! them). Also how commands open the store: a command that records something creates the
//! store (but never its missing parent directories, unless it is the default location); a
//! command that only reads never creates anything.

use std::fmt;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use agentrun_core::PreviewLimits;
use agentrun_core::sink::DEFAULT_SINK_VAR;
use agentrun_fs::Store;
use agentrun_fs::config::{Config, DEFAULT_GC_GRACE, DEFAULT_RECORD_RETENTION, format_duration};
use clap::Args;

use crate::GlobalArgs;

/// Whether a store setting is an object-store URL rather than a directory.
fn is_url(value: &Path) -> bool {
    value.to_str().is_some_and(agentrun_fs::is_store_url)
}
use crate::failure::{Failure, write_or_quiet};

/// Where a setting's value comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Source {
    /// Built in.
    Default,
    /// A command-line flag.
    Flag(&'static str),
    /// An environment variable.
    Env(&'static str),
    /// The config file.
    File,
}

impl fmt::Display for Source {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Source::Default => f.write_str("default"),
            Source::Flag(flag) => write!(f, "flag {flag}"),
            Source::Env(var) => write!(f, "environment variable {var}"),
            Source::File => f.write_str("config file"),
        }
    }
}

/// A value and where it came from.
#[derive(Debug, Clone)]
pub(crate) struct Setting<T> {
    pub(crate) value: T,
    pub(crate) source: Source,
}

impl<T> Setting<T> {
    fn new(value: T, source: Source) -> Self {
        Self { value, source }
    }
}

/// The config file (if any) and the global flags, resolved on demand (the command line's
/// configuration; an auto-mode session's own settings are `agentrun_core::auto_mode::Settings`).
#[derive(Debug)]
pub(crate) struct Settings {
    /// The config file looked for, and whether `--config` named it.
    config_path: Option<Setting<PathBuf>>,
    /// Whether the file existed (and was read).
    config_found: bool,
    config: Config,
    store_flag: Option<PathBuf>,
}

impl Settings {
    /// Reads the config file: the one `--config` names (which must exist), else the default
    /// one if it exists.
    pub(crate) fn load(global: &GlobalArgs) -> Result<Self, Failure> {
        let config_path = match &global.config {
            Some(path) => Some(Setting::new(path.clone(), Source::Flag("--config"))),
            None => Config::default_path().map(|p| Setting::new(p, Source::Default)),
        };
        let mut config = Config::default();
        let mut config_found = false;
        if let Some(path) = &config_path {
            let explicit = path.source != Source::Default;
            if explicit || path.value.exists() {
                config = Config::load(&path.value).map_err(Failure::usage)?;
                config_found = true;
            }
        }
        Ok(Self {
            config_path,
            config_found,
            config,
            store_flag: global.store.clone(),
        })
    }

    /// The store: `--store`, else `$AGENTRUN_STORE`, else the config file's `store` when it
    /// is an object-store URL, else `$AGENTRUN_HOME`, else the config file's `store`, else
    /// `$XDG_DATA_HOME/agentrun`, else `~/.local/share/agentrun`. A directory, or an
    /// object-store URL (`s3://BUCKET/PREFIX`, `gs://…`, `az://…`, `file:///…`).
    pub(crate) fn store_root(&self) -> Result<Setting<PathBuf>, Failure> {
        if let Some(dir) = &self.store_flag {
            return Ok(Setting::new(dir.clone(), Source::Flag("--store")));
        }
        if let Some(dir) = std::env::var_os("AGENTRUN_STORE").filter(|v| !v.is_empty()) {
            return Ok(Setting::new(dir.into(), Source::Env("AGENTRUN_STORE")));
        }
        if let Some(url) = self.config.store.as_deref().filter(|p| is_url(p)) {
            return Ok(Setting::new(url.to_path_buf(), Source::File));
        }
        if let Some(dir) = std::env::var_os("AGENTRUN_HOME").filter(|v| !v.is_empty()) {
            return Ok(Setting::new(dir.into(), Source::Env("AGENTRUN_HOME")));
        }
        if let Some(dir) = &self.config.store {
            return Ok(Setting::new(expand_home(dir)?, Source::File));
        }
        let root =
            Store::default_root().map_err(|e| Failure::usage(format!("{e} (--store DIR)")))?;
        Ok(Setting::new(root, Source::Default))
    }

    /// Opens a shared store on object storage, spooling in `$AGENTRUN_HOME` (else the default
    /// local root).
    fn open_url(&self, url: &Path) -> Result<Store, Failure> {
        let spool = match std::env::var_os("AGENTRUN_HOME").filter(|v| !v.is_empty()) {
            Some(dir) => PathBuf::from(dir),
            None => Store::default_root().map_err(|e| {
                Failure::usage(format!("{e} (the local spool of {})", url.display()))
            })?,
        };
        Store::open_url(&url.to_string_lossy(), spool).map_err(store_failure)
    }

    /// Opens the store, creating it if missing. A store named explicitly (flag, variable,
    /// config file) is created only inside an existing directory, so a typo does not leave a
    /// tree of directories behind; the default location gets its parents created.
    pub(crate) fn open_store(&self) -> Result<Store, Failure> {
        let root = self.store_root()?;
        if is_url(&root.value) {
            return self.open_url(&root.value);
        }
        if root.source != Source::Default && !root.value.exists() {
            let parent = root
                .value
                .parent()
                .filter(|p| !p.as_os_str().is_empty())
                .unwrap_or(Path::new("."));
            if !parent.is_dir() {
                return Err(Failure::usage(format!(
                    "cannot create the store {}: its parent directory {} does not exist; create \
                     it first or choose another store ({})",
                    root.value.display(),
                    parent.display(),
                    root.source
                )));
            }
        }
        Store::open(&root.value).map_err(store_failure)
    }

    /// The price table: built in, with the config file's `[prices]` on top.
    pub(crate) fn price_table(&self) -> agentrun_core::budget::PriceTable {
        self.config.price_table()
    }

    /// Opens the store only if it exists (`None` otherwise): for commands that only read.
    /// A shared store on object storage always exists (its bucket is checked by the first
    /// request).
    pub(crate) fn existing_store(&self) -> Result<Option<Store>, Failure> {
        let root = self.store_root()?;
        if is_url(&root.value) {
            return self.open_url(&root.value).map(Some);
        }
        if !root.value.exists() {
            return Ok(None);
        }
        Store::open(&root.value).map(Some).map_err(store_failure)
    }

    /// Like [`Settings::existing_store`], but a missing store is an error naming it.
    pub(crate) fn store_to_read(&self) -> Result<Store, Failure> {
        match self.existing_store()? {
            Some(store) => Ok(store),
            None => Err(Failure::runtime(format!(
                "there is no store at {} (nothing was recorded there yet); pass --store DIR or \
                 set AGENTRUN_HOME to read another one",
                self.store_root()?.value.display()
            ))),
        }
    }

    /// The preview limits: the given flags over `[tool_output]` over the defaults.
    pub(crate) fn limits(&self, flags: &LimitFlags) -> Result<PreviewLimits, Failure> {
        let file = self
            .config
            .limits(PreviewLimits::default())
            .map_err(Failure::usage)?;
        let limits = PreviewLimits {
            max_lines: flags.max_lines.unwrap_or(file.max_lines),
            max_bytes: flags.max_bytes.unwrap_or(file.max_bytes),
            tail_lines: flags.tail_lines.unwrap_or(file.tail_lines),
            max_payload_bytes: flags.max_payload_bytes.unwrap_or(file.max_payload_bytes),
        };
        limits.validate().map_err(Failure::usage)?;
        Ok(limits)
    }

    /// The variable naming the result sink: `--sink-var`, else the config file's, else
    /// `AGENTRUN_RESULT_SINK`.
    pub(crate) fn sink_var(&self, flag: Option<&str>) -> Setting<String> {
        match (flag, &self.config.sink_var) {
            (Some(v), _) => Setting::new(v.to_owned(), Source::Flag("--sink-var")),
            (None, Some(v)) => Setting::new(v.clone(), Source::File),
            (None, None) => Setting::new(DEFAULT_SINK_VAR.to_owned(), Source::Default),
        }
    }

    /// How long records are kept (`None`: forever): `--retention`, else `[retention]
    /// records`, else 30 days.
    pub(crate) fn retention(&self, flag: Option<Option<Duration>>) -> Setting<Option<Duration>> {
        match (flag, self.config.retention.records) {
            (Some(v), _) => Setting::new(v, Source::Flag("--retention")),
            (None, Some(v)) => Setting::new(v, Source::File),
            (None, None) => Setting::new(Some(DEFAULT_RECORD_RETENTION), Source::Default),
        }
    }

    /// The GC grace period: `--grace`, else `[retention] grace`, else 1 hour.
    pub(crate) fn grace(&self, flag: Option<Duration>) -> Setting<Duration> {
        match (flag, self.config.retention.grace) {
            (Some(v), _) => Setting::new(v, Source::Flag("--grace")),
            (None, Some(v)) => Setting::new(v, Source::File),
            (None, None) => Setting::new(DEFAULT_GC_GRACE, Source::Default),
        }
    }
}

/// `~/x` → `$HOME/x`; other relative paths are refused (relative to what?).
fn expand_home(path: &Path) -> Result<PathBuf, Failure> {
    if let Ok(rest) = path.strip_prefix("~")
        && let Some(home) = std::env::var_os("HOME").filter(|h| !h.is_empty())
    {
        return Ok(PathBuf::from(home).join(rest));
    }
    if path.is_absolute() {
        return Ok(path.to_owned());
    }
    Err(Failure::usage(format!(
        "the config file's store = {:?} must be an absolute path or start with ~/",
        path.display().to_string()
    )))
}

/// The preview-limit flags shared by the commands that run something.
#[derive(Debug, Clone, Default, Args)]
pub(crate) struct LimitFlags {
    /// Most lines shown per stream [default: 2000, or `[tool_output] max_lines`].
    #[arg(long, value_name = "N", help_heading = "Preview options",
          value_parser = positive_u64)]
    pub(crate) max_lines: Option<u64>,
    /// Most preview bytes shown per stream [default: 51200, or `[tool_output] max_bytes`].
    #[arg(long, value_name = "N", help_heading = "Preview options",
          value_parser = positive_usize)]
    pub(crate) max_bytes: Option<usize>,
    /// Bound on the whole preview, headings and hints included [default: 1048576, or
    /// `[tool_output] max_payload_bytes`].
    #[arg(long, value_name = "N", help_heading = "Preview options",
          value_parser = payload_bytes)]
    pub(crate) max_payload_bytes: Option<usize>,
    /// Also show this many last lines of a truncated stream [default: 0, or `[tool_output]
    /// tail_lines`].
    #[arg(long, value_name = "N", help_heading = "Preview options")]
    pub(crate) tail_lines: Option<u64>,
}

fn positive_u64(s: &str) -> Result<u64, String> {
    match s.parse::<u64>() {
        Ok(0) => Err("must be at least 1".to_owned()),
        Ok(n) => Ok(n),
        Err(e) => Err(e.to_string()),
    }
}

fn positive_usize(s: &str) -> Result<usize, String> {
    match s.parse::<usize>() {
        Ok(0) => Err("must be at least 1".to_owned()),
        Ok(n) => Ok(n),
        Err(e) => Err(e.to_string()),
    }
}

fn payload_bytes(s: &str) -> Result<usize, String> {
    let min = agentrun_core::limits::MIN_PAYLOAD_BYTES;
    match s.parse::<usize>() {
        Ok(n) if n < min => Err(format!("must be at least {min}")),
        Ok(n) => Ok(n),
        Err(e) => Err(e.to_string()),
    }
}

/// Arguments of `agentrun config`.
#[derive(Debug, Args)]
pub(crate) struct ConfigArgs {
    /// Print the settings as one JSON object: `{"config_file": …, "settings": {KEY: {"value":
    /// …, "source": …}}}`.
    #[arg(long, conflicts_with = "init")]
    pub(crate) json: bool,
    /// Write a commented sample config file (every setting, commented out at its default) to
    /// the config file's path (--config FILE, else the default path), then exit.
    #[arg(long)]
    pub(crate) init: bool,
    /// With --init: replace an existing file.
    #[arg(long, requires = "init")]
    force: bool,
}

/// The sample written by `agentrun config --init`: every key, commented out at its default,
/// so the file changes nothing until a line is uncommented.
const SAMPLE_CONFIG: &str = r#"# agentrun settings. Every key is optional; flags and environment variables override them.
# Uncomment a line to change a setting; `agentrun config` shows what is in effect.

# The store directory (absolute, or starting with ~/) [default: $XDG_DATA_HOME/agentrun,
# else ~/.local/share/agentrun]; AGENTRUN_HOME and --store override it.
# store = "~/.local/share/agentrun"

# The variable that names the result sink for `run --sink` (run --sink-var).
# sink_var = "AGENTRUN_RESULT_SINK"

[tool_output]
# Lines per stream in a preview (>= 1; run --max-lines).
# max_lines = 2000
# Bytes per stream in a preview (>= 1; run --max-bytes).
# max_bytes = 51200
# Last lines shown after a truncated head (0: off; run --tail-lines).
# tail_lines = 0
# Bound on the whole preview, in bytes (run --max-payload-bytes).
# max_payload_bytes = 1048576

[retention]
# How long run records are kept, or "never" (gc --retention).
# records = "30d"
# How long an object no record references is kept (gc --grace).
# grace = "1h"
"#;

/// `agentrun config --init`: writes [`SAMPLE_CONFIG`] to the config file's path. An existing
/// file is kept unless `--force`; the directory of the default path is created.
pub(crate) fn init(global: &GlobalArgs, args: &ConfigArgs) -> Result<ExitCode, Failure> {
    let (path, explicit) = match &global.config {
        Some(path) => (path.clone(), true),
        None => (
            Config::default_path().ok_or_else(|| {
                Failure::usage("no default config path (HOME is unset); pass --config FILE")
            })?,
            false,
        ),
    };
    if !explicit && let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)
            .map_err(|e| Failure::runtime(format!("cannot create {}: {e}", dir.display())))?;
    }
    let mut options = std::fs::OpenOptions::new();
    options.write(true);
    if args.force {
        options.create(true).truncate(true);
    } else {
        // Never replaces a file, even one created since the check a user would make.
        options.create_new(true);
    }
    let written = options
        .open(&path)
        .and_then(|mut f| std::io::Write::write_all(&mut f, SAMPLE_CONFIG.as_bytes()));
    match written {
        Ok(()) => {
            say!("agentrun: wrote a sample config to {}", path.display());
            Ok(ExitCode::SUCCESS)
        }
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Err(Failure::usage(format!(
            "{} already exists; edit it, or pass --force to replace it with the sample",
            path.display()
        ))),
        Err(e) => Err(Failure::runtime(format!(
            "cannot write {}: {e}",
            path.display()
        ))),
    }
}

/// `agentrun config`: the effective value of every setting and its source, as TOML a user
/// can paste into the config file.
pub(crate) fn show(settings: &Settings, args: ConfigArgs) -> Result<ExitCode, Failure> {
    let store = settings.store_root()?;
    let limits = settings.limits(&LimitFlags::default())?;
    let limit_source = |set: bool| if set { Source::File } else { Source::Default };
    let t = &settings.config.tool_output;
    let sink_var = settings.sink_var(None);
    let retention = settings.retention(None);
    let grace = settings.grace(None);
    let retention_text = retention.value.map_or("never".to_owned(), format_duration);
    let rows: Vec<(&str, serde_json::Value, String, Source)> = vec![
        (
            "store",
            store.value.display().to_string().into(),
            toml_string(&store.value.display().to_string()),
            store.source.clone(),
        ),
        (
            "sink_var",
            sink_var.value.clone().into(),
            toml_string(&sink_var.value),
            sink_var.source.clone(),
        ),
        (
            "tool_output.max_lines",
            limits.max_lines.into(),
            limits.max_lines.to_string(),
            limit_source(t.max_lines.is_some()),
        ),
        (
            "tool_output.max_bytes",
            limits.max_bytes.into(),
            limits.max_bytes.to_string(),
            limit_source(t.max_bytes.is_some()),
        ),
        (
            "tool_output.tail_lines",
            limits.tail_lines.into(),
            limits.tail_lines.to_string(),
            limit_source(t.tail_lines.is_some()),
        ),
        (
            "tool_output.max_payload_bytes",
            limits.max_payload_bytes.into(),
            limits.max_payload_bytes.to_string(),
            limit_source(t.max_payload_bytes.is_some()),
        ),
        (
            "retention.records",
            retention_text.clone().into(),
            toml_string(&retention_text),
            retention.source.clone(),
        ),
        (
            "retention.grace",
            format_duration(grace.value).into(),
            toml_string(&format_duration(grace.value)),
            grace.source.clone(),
        ),
    ];
    let file = settings.config_path.as_ref();
    let mut out = std::io::stdout().lock();
    if args.json {
        #[derive(serde::Serialize)]
        struct Setting<'a> {
            value: &'a serde_json::Value,
            source: String,
        }
        #[derive(serde::Serialize)]
        struct Config<'a> {
            config_file: Option<String>,
            config_file_found: bool,
            settings: crate::json_out::Ordered<Setting<'a>>,
        }
        let settings_json = rows
            .iter()
            .map(|(key, value, _, source)| {
                let source = source.to_string();
                ((*key).to_owned(), Setting { value, source })
            })
            .collect();
        let json = Config {
            config_file: file.map(|f| f.value.display().to_string()),
            config_file_found: settings.config_found,
            settings: crate::json_out::Ordered(settings_json),
        };
        return write_or_quiet(&mut out, crate::json_out::document(&json)?.as_bytes())
            .map(|()| ExitCode::SUCCESS);
    }
    let mut text = match file {
        Some(f) if settings.config_found => format!("# config file: {}\n", f.value.display()),
        Some(f) => format!("# config file: {} (not found)\n", f.value.display()),
        None => "# config file: none (neither XDG_CONFIG_HOME nor HOME is set)\n".to_owned(),
    };
    let mut section = "";
    for (key, _, value, source) in &rows {
        let (table, name) = key.split_once('.').unwrap_or(("", key));
        if table != section {
            text.push_str(&format!("\n[{table}]\n"));
            section = table;
        }
        text.push_str(&format!("{name} = {value:<30} # {source}\n"));
    }
    write_or_quiet(&mut out, text.as_bytes()).map(|()| ExitCode::SUCCESS)
}

/// A TOML basic string.
fn toml_string(s: &str) -> String {
    serde_json::Value::from(s).to_string()
}

/// A store that cannot be opened, with the command line's ways to pick another.
fn store_failure(e: agentrun_fs::StoreError) -> Failure {
    match e {
        agentrun_fs::StoreError::NotADirectory { .. } => {
            Failure::runtime(format!("{e} (--store DIR or AGENTRUN_HOME)"))
        }
        e => Failure::runtime(e),
    }
}

#[cfg(test)]
mod sample_tests {
    /// The sample is a valid config that changes nothing: every key is commented out, and
    /// uncommented it is still valid.
    #[test]
    fn the_sample_config_parses_commented_and_uncommented() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("c.toml");
        std::fs::write(&path, super::SAMPLE_CONFIG).unwrap();
        let config = agentrun_fs::config::Config::load(&path).unwrap();
        assert!(config.store.is_none());
        let uncommented: String = super::SAMPLE_CONFIG
            .lines()
            .map(|l| match l.strip_prefix("# ") {
                Some(setting) if setting.contains(" = ") => setting,
                _ => l,
            })
            .collect::<Vec<_>>()
            .join("\n");
        std::fs::write(&path, &uncommented).unwrap();
        let config = agentrun_fs::config::Config::load(&path)
            .unwrap_or_else(|e| panic!("{e}: {uncommented}"));
        assert_eq!(config.sink_var.as_deref(), Some("AGENTRUN_RESULT_SINK"));
        assert_eq!(config.tool_output.max_lines, Some(2000));
    }
}
