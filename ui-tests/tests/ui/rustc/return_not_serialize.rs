use agent_airlock::airlock_tool;

/// A report the model cannot read: not `Serialize`.
pub struct Report {
    pub lines: u32,
}

/// Build a report.
#[airlock_tool]
fn report(lines: u32) -> Report {
    Report { lines }
}

fn main() {
    let _ = agent_airlock::tool!(report);
}
