use agent_airlock::airlock_tool;

/// Look something up.
#[airlock_tool]
fn lookup(name: &str) -> usize {
    name.len()
}

fn main() {
    let _ = agent_airlock::tool!(lookup);
}
