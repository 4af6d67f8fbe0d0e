use agent_airlock::airlock_tool;

/// An error without `Display`.
#[derive(Debug)]
pub struct LookupFailed;

/// Look a number up.
#[airlock_tool]
fn lookup(key: u32) -> Result<u32, LookupFailed> {
    if key == 0 { Err(LookupFailed) } else { Ok(key) }
}

fn main() {
    let _ = agent_airlock::tool!(lookup);
}
