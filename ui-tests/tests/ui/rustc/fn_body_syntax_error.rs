use agent_airlock::airlock_tool;

/// Double a number, while the body is being typed.
#[airlock_tool]
fn double(value: u32) -> u32 {
    let x = ;
    value * 2
}

fn main() {
    // The tool type still exists: only the compiler's syntax error is reported.
    let _ = agent_airlock::tool!(double);
}
