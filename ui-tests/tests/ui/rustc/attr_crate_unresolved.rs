use agent_airlock::airlock_tool;

/// Look something up.
#[airlock_tool(crate = "airlock_runtime")]
fn lookup(id: u64) -> u64 {
    id
}

fn main() {
    let _ = agent_airlock::tool!(lookup);
}
