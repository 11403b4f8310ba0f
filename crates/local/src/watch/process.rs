//! The processes below `cargo lambda watch`, found in /proc and killed by
//! process group with the `kill` command (no `libc`, no unsafe code).

use std::collections::BTreeSet;
use std::process::Stdio;

/// A process below the watch: its pid and its process group.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(super) struct Descendant {
    pid: u32,
    pgrp: u32,
}

/// Every process below `root`, read from /proc (empty where there is none).
pub(super) fn descendants_of(root: u32) -> Vec<Descendant> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    let mut parent_of = Vec::new();
    for entry in entries.flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|s| s.parse::<u32>().ok())
        else {
            continue;
        };
        if let Some((ppid, pgrp)) = std::fs::read_to_string(entry.path().join("stat"))
            .ok()
            .and_then(|stat| parse_stat(&stat))
        {
            parent_of.push((pid, ppid, pgrp));
        }
    }
    let mut found: BTreeSet<Descendant> = BTreeSet::new();
    let mut frontier = vec![root];
    while let Some(parent) = frontier.pop() {
        for &(pid, ppid, pgrp) in &parent_of {
            if ppid == parent && found.insert(Descendant { pid, pgrp }) {
                frontier.push(pid);
            }
        }
    }
    found.into_iter().collect()
}

/// `(ppid, pgrp)` from the text of /proc/PID/stat. The command name is in
/// parentheses and may hold spaces or parentheses itself, so fields are
/// counted from the last `)`.
fn parse_stat(stat: &str) -> Option<(u32, u32)> {
    let rest = &stat[stat.rfind(')')? + 1..];
    let mut fields = rest.split_whitespace().skip(1); // the state
    let ppid = fields.next()?.parse().ok()?;
    let pgrp = fields.next()?.parse().ok()?;
    Some((ppid, pgrp))
}

pub(super) fn kill_all(descendants: &[Descendant]) {
    if descendants.is_empty() {
        return;
    }
    let groups: BTreeSet<u32> = descendants
        .iter()
        .map(|d| d.pgrp)
        .filter(|&g| g > 1)
        .collect();
    let mut targets: Vec<String> = groups.into_iter().map(|g| format!("-{g}")).collect();
    targets.extend(descendants.iter().map(|d| d.pid.to_string()));
    signal("KILL", &targets);
}

/// `kill -s SIG -- TARGET…`; a target that is already gone is not an error.
pub(super) fn signal(sig: &str, targets: &[String]) {
    if targets.is_empty() {
        return;
    }
    let _ = std::process::Command::new("kill")
        .args(["-s", sig, "--"])
        .args(targets)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status();
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_lines_are_parsed_from_the_last_parenthesis() {
        let stat = "4242 (cargo (lambda) x) S 17 4242 4242 0 -1 4194560 ...";
        assert_eq!(parse_stat(stat), Some((17, 4242)));
        assert_eq!(parse_stat("garbage"), None);
    }
}
