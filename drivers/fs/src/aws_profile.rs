//! Named AWS profiles: the keys, region and endpoint of a profile in `~/.aws/credentials` and
//! `~/.aws/config`, for an `s3://` store (object_store reads the environment, not the files).
//!
//! The profile is `AWS_PROFILE`, else `default`. Its settings apply under the environment's:
//! the credentials come from the profile only when the environment names no access key, and
//! `AWS_REGION` / `AWS_DEFAULT_REGION` and `AWS_ENDPOINT_URL` win over the profile's `region`
//! and `endpoint_url`. The files are `AWS_SHARED_CREDENTIALS_FILE` and `AWS_CONFIG_FILE`, else
//! `~/.aws/credentials` and `~/.aws/config`; in the credentials file a profile's section is
//! `[NAME]`, in the config file `[profile NAME]` (or `[default]`); where both set a key, the
//! credentials file's value is used. Lines starting with `#` or `;` are comments; a setting
//! with an empty value followed by indented lines is a block of sub-settings, of which only
//! `s3 =` / `endpoint_url` is read (the S3 endpoint, before the profile's own
//! `endpoint_url`). Profiles that get their credentials another way (assume-role, SSO, a
//! credential process) are refused with a message saying how to export them instead.

use std::collections::HashMap;
use std::io::Read;
use std::path::{Path, PathBuf};

/// Largest credentials or config file read (they are a few hundred bytes).
const MAX_FILE_BYTES: u64 = 1 << 20;

/// What a profile sets (as object_store's configuration keys name them).
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct Profile {
    /// `(key, value)`, e.g. `("aws_region", "eu-west-1")`.
    pub(crate) settings: Vec<(&'static str, String)>,
}

/// Why a profile cannot be used.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ProfileError {
    /// `AWS_PROFILE` names a profile neither file has.
    #[error(
        "AWS profile {profile:?} (from AWS_PROFILE) is in neither {} nor {}; set AWS_PROFILE \
         to one of their profiles, or unset it",
        .credentials.display(), .config.display()
    )]
    NotFound {
        /// The profile.
        profile: String,
        /// The credentials file looked in.
        credentials: PathBuf,
        /// The config file looked in.
        config: PathBuf,
    },
    /// The profile gets its credentials in a way agentrun does not implement.
    #[error(
        "AWS profile {profile:?} uses {setting}, which agentrun does not read; export the \
         profile's credentials instead: eval \"$(aws configure export-credentials --profile \
         {profile} --format env)\""
    )]
    Unsupported {
        /// The profile.
        profile: String,
        /// The setting (`role_arn`, `sso_session`, `credential_process`, …).
        setting: String,
    },
    /// A file cannot be read, or is not text, or is too large.
    #[error("cannot read the AWS {what} file {}: {detail}", .path.display())]
    Unreadable {
        /// "credentials" or "config".
        what: &'static str,
        /// The file.
        path: PathBuf,
        /// Why.
        detail: String,
    },
    /// The profile's credentials are half there.
    #[error("AWS profile {profile:?} sets {present} but not {missing}; set both, or neither")]
    Incomplete {
        /// The profile.
        profile: String,
        /// The key it sets.
        present: &'static str,
        /// The key it lacks.
        missing: &'static str,
    },
}

/// Profile settings that mean credentials come from elsewhere.
const INDIRECT: [&str; 5] = [
    "role_arn",
    "sso_session",
    "sso_start_url",
    "credential_process",
    "web_identity_token_file",
];

/// The profile's settings to apply under the environment's, or `None` when no profile
/// applies (no `AWS_PROFILE` and no `default` profile in either file). `env` looks a variable
/// up (a parameter, so tests need not touch the process environment).
pub(crate) fn load(env: &dyn Fn(&str) -> Option<String>) -> Result<Option<Profile>, ProfileError> {
    let var = |name: &str| env(name).filter(|v| !v.is_empty());
    let named = var("AWS_PROFILE");
    let profile = named.clone().unwrap_or_else(|| "default".to_owned());
    let home = var("HOME").map(PathBuf::from);
    let file = |var_name: &str, default: &str| {
        var(var_name)
            .map(PathBuf::from)
            .or_else(|| home.as_ref().map(|h| h.join(".aws").join(default)))
    };
    let credentials_path = file("AWS_SHARED_CREDENTIALS_FILE", "credentials");
    let config_path = file("AWS_CONFIG_FILE", "config");
    let credentials = match &credentials_path {
        Some(p) => read(p, "credentials")?.map(|t| parse(&t)),
        None => None,
    };
    let config = match &config_path {
        Some(p) => read(p, "config")?.map(|t| parse(&t)),
        None => None,
    };
    let config_section = if profile == "default" {
        "default".to_owned()
    } else {
        format!("profile {profile}")
    };
    let from_credentials = credentials.as_ref().and_then(|c| c.get(&profile));
    let from_config = config.as_ref().and_then(|c| c.get(&config_section));
    if from_credentials.is_none() && from_config.is_none() {
        if named.is_some() {
            return Err(ProfileError::NotFound {
                profile,
                credentials: credentials_path.unwrap_or_default(),
                config: config_path.unwrap_or_default(),
            });
        }
        return Ok(None);
    }
    // The credentials file first: its value wins where both set a key.
    let get = |key: &str| {
        from_credentials
            .and_then(|s| s.get(key))
            .or_else(|| from_config.and_then(|s| s.get(key)))
            .filter(|v| !v.is_empty())
            .cloned()
    };
    let mut out = Profile::default();
    let env_has_keys = var("AWS_ACCESS_KEY_ID").is_some();
    let key_id = get("aws_access_key_id");
    let secret = get("aws_secret_access_key");
    if !env_has_keys {
        match (&key_id, &secret) {
            (Some(id), Some(secret)) => {
                out.settings.push(("aws_access_key_id", id.clone()));
                out.settings.push(("aws_secret_access_key", secret.clone()));
                if let Some(token) = get("aws_session_token") {
                    out.settings.push(("aws_session_token", token));
                }
            }
            (Some(_), None) | (None, Some(_)) => {
                let (present, missing) = if key_id.is_some() {
                    ("aws_access_key_id", "aws_secret_access_key")
                } else {
                    ("aws_secret_access_key", "aws_access_key_id")
                };
                return Err(ProfileError::Incomplete {
                    profile,
                    present,
                    missing,
                });
            }
            (None, None) => {
                if let Some(setting) = INDIRECT.iter().find(|k| get(k).is_some()) {
                    return Err(ProfileError::Unsupported {
                        profile,
                        setting: (*setting).to_owned(),
                    });
                }
            }
        }
    }
    if var("AWS_REGION").is_none()
        && var("AWS_DEFAULT_REGION").is_none()
        && let Some(region) = get("region")
    {
        out.settings.push(("aws_region", region));
    }
    if var("AWS_ENDPOINT_URL").is_none()
        && var("AWS_ENDPOINT").is_none()
        && let Some(endpoint) = get("s3.endpoint_url").or_else(|| get("endpoint_url"))
    {
        out.settings.push(("aws_endpoint", endpoint));
    }
    Ok(Some(out))
}

/// The text of `path`, `None` when it does not exist.
fn read(path: &Path, what: &'static str) -> Result<Option<String>, ProfileError> {
    let unreadable = |detail: String| ProfileError::Unreadable {
        what,
        path: path.to_owned(),
        detail,
    };
    // A FIFO or device in its place is refused by type, never waited on.
    let file = match crate::special::open_regular(path, crate::special::Links::Follow) {
        Ok((file, _)) => file,
        Err(crate::special::OpenError::Io(e)) if e.kind() == std::io::ErrorKind::NotFound => {
            return Ok(None);
        }
        Err(crate::special::OpenError::NotRegular(kind)) => {
            return Err(unreadable(format!("it is {kind}, not a regular file")));
        }
        Err(crate::special::OpenError::Io(e)) => return Err(unreadable(e.to_string())),
    };
    let mut bytes = Vec::new();
    file.take(MAX_FILE_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| unreadable(e.to_string()))?;
    if bytes.len() as u64 > MAX_FILE_BYTES {
        return Err(unreadable(format!(
            "it is larger than {MAX_FILE_BYTES} bytes"
        )));
    }
    String::from_utf8(bytes)
        .map(Some)
        .map_err(|_| unreadable("it is not UTF-8 text".to_owned()))
}

/// Sections by name (`default`, `profile NAME`, `NAME`), each its settings by key; a
/// sub-setting is keyed `PARENT.KEY`. Malformed lines are skipped.
fn parse(text: &str) -> HashMap<String, HashMap<String, String>> {
    let mut sections: HashMap<String, HashMap<String, String>> = HashMap::new();
    let mut current: Option<String> = None;
    // The setting whose indented sub-settings follow (`s3 =`).
    let mut parent: Option<String> = None;
    for raw in text.lines() {
        let indented = raw.starts_with([' ', '\t']);
        let line = raw.trim();
        if line.is_empty() || line.starts_with(['#', ';']) {
            continue;
        }
        if let Some(name) = line.strip_prefix('[') {
            parent = None;
            current = name.split_once(']').map(|(name, _)| {
                // `[profile  name]` and `[ default ]` name the same section.
                name.split_whitespace().collect::<Vec<_>>().join(" ")
            });
            if let Some(name) = &current {
                sections.entry(name.clone()).or_default();
            }
            continue;
        }
        let Some(section) = current.as_ref().and_then(|c| sections.get_mut(c)) else {
            continue;
        };
        let Some((key, value)) = line.split_once('=') else {
            continue;
        };
        let key = key.trim().to_ascii_lowercase();
        let value = strip_comment(value.trim()).to_owned();
        if indented && let Some(parent) = &parent {
            section.insert(format!("{parent}.{key}"), value);
            continue;
        }
        parent = value.is_empty().then(|| key.clone());
        section.insert(key, value);
    }
    sections
}

/// A value without a trailing comment (` #…` or ` ;…`: a comment begins after whitespace).
fn strip_comment(value: &str) -> &str {
    let bytes = value.as_bytes();
    for i in 1..bytes.len() {
        if matches!(bytes[i], b'#' | b';') && bytes[i - 1].is_ascii_whitespace() {
            return value[..i].trim_end();
        }
    }
    value
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A home with the two files, and an environment lookup over `vars` (HOME set to it).
    fn setup(
        credentials: &str,
        config: &str,
        vars: &[(&str, &str)],
    ) -> (tempfile::TempDir, impl Fn(&str) -> Option<String>) {
        let home = tempfile::tempdir().unwrap();
        std::fs::create_dir(home.path().join(".aws")).unwrap();
        std::fs::write(home.path().join(".aws/credentials"), credentials).unwrap();
        std::fs::write(home.path().join(".aws/config"), config).unwrap();
        let mut map: HashMap<String, String> = vars
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        map.insert("HOME".to_owned(), home.path().display().to_string());
        (home, move |name: &str| map.get(name).cloned())
    }

    fn settings(profile: Option<Profile>) -> Vec<(&'static str, String)> {
        profile.expect("a profile applies").settings
    }

    const CREDENTIALS: &str = "\
# work keys
[default]
aws_access_key_id = AKIDEFAULT
aws_secret_access_key = secretdefault

[ci]
aws_access_key_id=AKIDCI
aws_secret_access_key=secret;ci   ; the semicolon before is part of the value
aws_session_token = token-ci
";

    const CONFIG: &str = "\
[default]
region = eu-west-1

[profile ci]
region = us-east-2 # Ohio
endpoint_url = http://general.example:9000
s3 =
  endpoint_url = http://minio.internal:9000
  addressing_style = path
output = json

[profile assume]
role_arn = arn:aws:iam::123456789012:role/ci
source_profile = default
";

    #[test]
    fn the_default_profile_gives_keys_and_region() {
        let (_home, env) = setup(CREDENTIALS, CONFIG, &[]);
        assert_eq!(
            settings(load(&env).unwrap()),
            [
                ("aws_access_key_id", "AKIDEFAULT".to_owned()),
                ("aws_secret_access_key", "secretdefault".to_owned()),
                ("aws_region", "eu-west-1".to_owned()),
            ]
        );
    }

    #[test]
    fn a_named_profile_reads_both_files_with_the_s3_endpoint_first() {
        let (_home, env) = setup(CREDENTIALS, CONFIG, &[("AWS_PROFILE", "ci")]);
        assert_eq!(
            settings(load(&env).unwrap()),
            [
                ("aws_access_key_id", "AKIDCI".to_owned()),
                ("aws_secret_access_key", "secret;ci".to_owned()),
                ("aws_session_token", "token-ci".to_owned()),
                ("aws_region", "us-east-2".to_owned()),
                ("aws_endpoint", "http://minio.internal:9000".to_owned()),
            ]
        );
    }

    #[test]
    fn the_environment_wins_over_the_profile() {
        let vars = [
            ("AWS_PROFILE", "ci"),
            ("AWS_ACCESS_KEY_ID", "AKIDENV"),
            ("AWS_REGION", "ap-south-1"),
            ("AWS_ENDPOINT_URL", "http://env.example"),
        ];
        let (_home, env) = setup(CREDENTIALS, CONFIG, &vars);
        // Nothing of the profile is used: not its keys (the environment has some), nor its
        // region or endpoint.
        assert_eq!(settings(load(&env).unwrap()), []);
    }

    #[test]
    fn the_files_can_be_elsewhere_and_missing_files_mean_no_profile() {
        let (home, env) = setup("", "", &[]);
        assert_eq!(load(&env).unwrap(), None);
        let elsewhere = home.path().join("creds");
        std::fs::write(&elsewhere, "[default]\nregion=sa-east-1\n").unwrap();
        let path = elsewhere.display().to_string();
        let env2 = |name: &str| match name {
            "AWS_SHARED_CREDENTIALS_FILE" => Some(path.clone()),
            "AWS_CONFIG_FILE" => Some("/nonexistent/agentrun-test/config".to_owned()),
            _ => env(name),
        };
        assert_eq!(
            settings(load(&env2).unwrap()),
            [("aws_region", "sa-east-1".to_owned())]
        );
    }

    #[test]
    fn unusable_profiles_are_refused_with_what_to_do() {
        let (_home, env) = setup(CREDENTIALS, CONFIG, &[("AWS_PROFILE", "nope")]);
        let err = load(&env).unwrap_err();
        assert!(matches!(err, ProfileError::NotFound { .. }), "{err:?}");
        assert!(err.to_string().contains("\"nope\""), "{err}");

        let (_home, env) = setup(CREDENTIALS, CONFIG, &[("AWS_PROFILE", "assume")]);
        let err = load(&env).unwrap_err();
        assert!(
            matches!(&err, ProfileError::Unsupported { setting, .. } if setting == "role_arn"),
            "{err:?}"
        );
        assert!(
            err.to_string()
                .contains("aws configure export-credentials --profile assume"),
            "{err}"
        );

        let (_home, env) = setup("[default]\naws_access_key_id = AKID\n", "", &[]);
        let err = load(&env).unwrap_err();
        assert!(
            matches!(
                err,
                ProfileError::Incomplete {
                    missing: "aws_secret_access_key",
                    ..
                }
            ),
            "{err:?}"
        );

        let (home, env) = setup("", "", &[]);
        std::fs::remove_file(home.path().join(".aws/config")).unwrap();
        rustix::fs::mkfifoat(
            rustix::fs::CWD,
            home.path().join(".aws/config"),
            rustix::fs::Mode::from_raw_mode(0o600),
        )
        .unwrap();
        let err = load(&env).unwrap_err();
        assert!(err.to_string().contains("a FIFO"), "{err}");
    }

    #[test]
    fn malformed_lines_are_skipped_and_sections_merge() {
        let text = "\
key_before_any_section = x
[default
[default]
no equals sign
aws_access_key_id = A
[  profile   spaced  ]
region = r1
[default]
aws_secret_access_key = B
";
        let parsed = parse(text);
        assert_eq!(parsed["default"]["aws_access_key_id"], "A");
        assert_eq!(parsed["default"]["aws_secret_access_key"], "B");
        assert_eq!(parsed["profile spaced"]["region"], "r1");
        assert!(!parsed.contains_key("default\n"));
    }
}
