use agent_airlock::airlock_tool;

#[airlock_tool(rate = "5/fortnight", ghost = "drop")]
fn lookup<T>(_: u64, name: &str, ids: Vec<impl std::fmt::Display>, extra: T) -> usize {
    let _ = extra;
    name.len() + ids.len()
}

fn main() {
    let _ = agent_airlock::tool!(lookup);
}
