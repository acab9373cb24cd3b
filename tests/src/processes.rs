//! Looking at processes a test started, through `/proc` (Linux).

/// Whether process `pid` has ended: gone, or a zombie awaiting its reaper.
pub fn ended(pid: i32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => true,
        Ok(stat) => stat
            .rsplit_once(')')
            .is_some_and(|(_, rest)| rest.trim_start().starts_with('Z')),
    }
}
