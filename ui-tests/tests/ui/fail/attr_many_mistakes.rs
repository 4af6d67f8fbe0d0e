use agent_airlock::airlock_tool;

/// Look something up.
#[airlock_tool(nmae = "lookup", rate = "0/minute", ghost = "drop", escalate = "", name = 7)]
fn lookup(id: u64) -> u64 {
    id
}

fn main() {
    let _ = agent_airlock::tool!(lookup);
}
