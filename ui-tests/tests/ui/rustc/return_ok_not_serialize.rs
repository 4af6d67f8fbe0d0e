use agent_airlock::airlock_tool;

/// A report without `Serialize`.
pub struct Report {
    pub lines: u32,
}

/// Make a report.
#[airlock_tool]
fn report(lines: u32) -> Result<Report, String> {
    Ok(Report { lines })
}

fn main() {
    let _ = agent_airlock::tool!(report);
}
