//! Shared helpers for the cross-crate tests and the fuzz targets.
//!
//! * [`checks`]: the properties of capture, previews, hints and reads as functions that panic only
//!   on a violation;
//! * [`auto_mode_checks`]: the properties of auto mode's sanitizer and verdict parser;
//! * [`compaction_checks`]: the properties of compaction (transcripts, pruning, the retry);
//! * [`harness_checks`]: the properties of the harness decoders through `Interpretation`;
//! * [`lifecycle_checks`]: the properties of the run lifecycle over arbitrary event sequences;
//! * [`fuzz_bodies`]: the fuzz targets' bodies, turning arbitrary bytes into those checks;
//! * [`fuzz_inputs`]: the structured inputs of the sequence fuzz targets (`arbitrary`), and
//!   their encoder for seeds; [`fuzz_seeds`]: their seeds as typed values;
//! * [`model_server`]: scripted model servers (Anthropic Messages, OpenAI Responses and chat
//!   completions) on 127.0.0.1 for running the real agent CLIs offline;
//! * [`agent_clis`]: the pinned real agent CLIs (installed on first use) and the environment
//!   that runs them offline;
//! * [`processes`]: whether a process a test started has ended.

pub mod agent_clis;
pub mod auto_mode_checks;
pub mod checks;
pub mod compaction_checks;
pub mod fuzz_bodies;
pub mod fuzz_inputs;
pub mod fuzz_seeds;
pub mod harness_checks;
pub mod lifecycle_checks;
pub mod machine_fuzz;
pub mod model_server;
pub mod processes;
