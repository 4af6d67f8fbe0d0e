//! The OS processes the integration tests start (racing hosts, a host killed mid-call, an audit writer
//! killed mid-append): one binary, its first argument the role, so the suite links one worker, not eight.
//! `worker ROLE ARGS...`; each role's arguments are in its module's documentation.

use std::process::ExitCode;

mod audit_append_loop;
mod audit_file_fill;
mod dispatch_worker;
mod effect_hold;
mod effect_race;
mod ledger_worker;
mod pg_dispatch_worker;
mod pg_rate_worker;
mod pg_spender;

fn main() -> ExitCode {
    match std::env::args().nth(1).as_deref() {
        Some("audit_append_loop") => {
            audit_append_loop::main();
            ExitCode::SUCCESS
        }
        Some("audit_file_fill") => audit_file_fill::main(),
        Some("dispatch_worker") => dispatch_worker::main(),
        Some("effect_hold") => {
            effect_hold::main();
            ExitCode::SUCCESS
        }
        Some("effect_race") => {
            effect_race::main();
            ExitCode::SUCCESS
        }
        Some("ledger_worker") => ledger_worker::main(),
        Some("pg_dispatch_worker") => pg_dispatch_worker::main(),
        Some("pg_rate_worker") => pg_rate_worker::main(),
        Some("pg_spender") => {
            pg_spender::main();
            ExitCode::SUCCESS
        }
        _ => {
            eprintln!(
                "usage: worker ROLE ARGS... (ROLE: audit_append_loop, audit_file_fill, dispatch_worker, effect_hold, effect_race, \
                 ledger_worker, pg_dispatch_worker, pg_rate_worker, pg_spender)"
            );
            ExitCode::from(2)
        }
    }
}
