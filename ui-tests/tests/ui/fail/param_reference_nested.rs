use agent_airlock::airlock_tool;

/// Look something up.
#[airlock_tool]
fn lookup(names: Vec<&str>) -> usize {
    names.len()
}

fn main() {
    let _ = agent_airlock::tool!(lookup);
}
