//! Masking throughput on realistic tool output (target: 2 KB in ≤ 20 µs; the Python peer takes ~1,000 µs).

use std::hint::black_box;

use agent_airlock::{
    keys::HashKey,
    mask::{MaskConfig, MaskSet, MaskStrategy, Masker},
};
use criterion::{Criterion, Throughput, criterion_group, criterion_main};

/// One record of the kind a CRM or order tool returns: ids, timestamps, prices, versions, hashes, prose.
fn clean_record(i: usize) -> String {
    format!(
        concat!(
            "{{\"order_id\": \"ORD-{i:06}\", \"order_number\": {on}, \"created_at\": \"2024-05-{d:02}T10:{m:02}:00Z\", ",
            "\"ts\": {ts}, \"uuid\": \"550e8400-e29b-41d4-a716-4466554400{i2:02}\", \"status\": \"shipped\", ",
            "\"total\": \"$1,249.{c:02}\", \"sku\": \"SKU-88{i:04}\", \"client\": \"agent/2.{i}.0 (build 10.0.1.{i})\", ",
            "\"commit\": \"9fceb02d0ae598e95dc970b74767f19372d61af8\", \"note\": \"Customer asked to leave the parcel ",
            "at the back door; follow-up scheduled, see ticket #{on} and https://shop.example.com/orders/{i}\"}}\n"
        ),
        i = i,
        i2 = i % 100,
        on = 123_456_000 + i,
        d = 1 + i % 28,
        m = i % 60,
        ts = 1_700_000_000 + i * 37,
        c = i % 100,
    )
}

fn dirty_extras(i: usize) -> String {
    match i % 4 {
        0 => format!("contact: jane.doe{i}@example.com, phone +1 415 555 {:04}\n", 2671 + i),
        1 => "card 4111 1111 1111 1111 exp 12/27; Authorization: Bearer abcDEF1234567890ghijKLMNOP\n".to_owned(),
        2 => "key=AKIAIOSFODNN7QK4RW2Z db=postgres://app:s3cr3t-Pa55@db.internal:5432/shop\n".to_owned(),
        _ => "ssn 123-45-6789 iban DE89 3704 0044 0532 0130 00 token: ghp_abcdefghijklmnopqrstuvwxyz0123456789\n"
            .to_owned(),
    }
}

fn text_of(size: usize, dirty: bool) -> String {
    let mut text = String::with_capacity(size + 512);
    let mut i = 0;
    while text.len() < size {
        text.push_str(&clean_record(i));
        if dirty && i % 3 == 0 {
            text.push_str(&dirty_extras(i / 3));
        }
        i += 1;
    }
    text.truncate(size); // ASCII only
    text
}

/// Deterministic pseudo-random bytes (xorshift), so each run measures the same text.
fn pseudo_random(len: usize, alphabet: &[u8]) -> String {
    let mut state: u64 = 0x9E37_79B9_7F4A_7C15;
    (0..len)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            char::from(alphabet[(state % alphabet.len() as u64) as usize])
        })
        .collect()
}

const MIB: usize = 1 << 20;

/// Ordinary service logs without secrets: timestamps, levels, `key=value` fields, paths, durations, prose.
fn log_lines(size: usize) -> String {
    let mut text = String::with_capacity(size + 256);
    let mut i = 0usize;
    while text.len() < size {
        text.push_str(&format!(
            "2024-05-{d:02}T10:{m:02}:{s:02}.{i:03}Z INFO http: request handled method=GET path=/api/v1/orders/{i} \
             status=200 duration_ms={ms} user_agent=\"Mozilla/5.0 (X11; Linux x86_64)\" request_id=req-{i:08x} \
             msg=\"order shipped, retry count {r} of 3\"\n",
            d = 1 + i % 28,
            m = i % 60,
            s = (i * 7) % 60,
            i = i % 1000,
            ms = 3 + i % 250,
            r = i % 3,
        ));
        i += 1;
    }
    text.truncate(size); // ASCII only
    text
}

/// The texts of the masking fuzz target's regressions (the inputs that once broke it), repeated to `size`.
fn fuzz_regressions(size: usize) -> String {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../fuzz/regressions/masking");
    let mut inputs: Vec<String> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .filter_map(Result::ok)
        .filter(|entry| entry.path().extension().is_some_and(|ext| ext == "json"))
        .filter_map(|entry| std::fs::read_to_string(entry.path()).ok())
        .filter_map(|json| serde_json::from_str::<serde_json::Value>(&json).ok())
        .filter_map(|value| value.get("text").and_then(|t| t.as_str()).map(str::to_owned))
        .collect();
    inputs.sort();
    let one: String = inputs.iter().flat_map(|t| [t.as_str(), "\n"]).collect();
    let mut text = one.repeat(size / one.len().max(1) + 1);
    let mut cut = size.min(text.len());
    while !text.is_char_boundary(cut) {
        cut -= 1;
    }
    text.truncate(cut);
    text
}

fn adversarial_texts() -> Vec<(&'static str, String)> {
    let base64 = pseudo_random(MIB, b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/");
    let capitals = pseudo_random(MIB, b"ABCDEFGHIJKLMNOPQRSTUVWXYZ-");
    let worst = include_str!("../../fuzz/regressions/masking_glued_dotted_quads.txt");
    let quads = worst.repeat(MIB / worst.len() + 1);
    let keywords =
        "glpat-x xoxb- AKIA sk- ghp_ adafruit_key: hooks.slack.com/ eyJ a3- q~ sc_ token=\n".repeat(MIB / 70);
    let corpus: String = include_str!("../../tests/masking/gitleaks/true_positives.tsv")
        .lines()
        .filter(|line| !line.starts_with('#'))
        .filter_map(|line| line.rsplit('\t').next())
        .flat_map(|text| [text, "\n"])
        .collect();
    let ordinary = text_of(MIB, true);
    // The masking fuzzer's two quadratic shapes of 12-03: BEGIN lines with no END line after them (behind one
    // whole block), and one run of key bytes holding a token prefix every few bytes.
    let begin_line = "-----BEGIN PRIVATE KEY-----gres#://token=(555) (551.2.30\":nul._0";
    let begin_lines = format!(
        "-----BEGIN EC PRIVATE KEY-----\nMHcCAQEE\n-----END EC PRIVATE KEY-----\n{}",
        begin_line.repeat(MIB / begin_line.len())
    );
    let prefix_run = "00555-0100sk-sk-sk-xoxb-555-0100sk-sk-";
    // And the two of 12-04: runs that refuse the `sk-` token, then the `sk-` and `xoxb-` tokens, in turn (the
    // fuzzer's); labels whose bare values run on to the end of the text, each overtaken by an e-mail found
    // before it (the property test `repeated_text_is_searched_in_linear_time`'s).
    let alternating_runs = "tAtk555-0100555-0100sk-sk-sk-sk-s.-xoxb-sk-sk--100sk-sk-sk-sk-s.-xoxb-sk-sk--s-sk-sk--100";
    let overtaken_labels = "user:pass@a@2x.pngtoken=";
    vec![
        ("orders_clean_1m", text_of(MIB, false)),
        ("logs_1m", log_lines(MIB)),
        ("base64_1m", base64),
        ("capitals_dashes_1m", capitals),
        ("one_char_1m", "a".repeat(MIB)),
        ("glued_quads_1m", quads),
        ("fuzz_regressions_1m", fuzz_regressions(MIB)),
        ("keywords_1m", keywords),
        ("gitleaks_corpus", corpus),
        ("orders_dirty_1m", ordinary),
        ("begin_lines_1m", begin_lines),
        ("token_prefix_run_1m", prefix_run.repeat(MIB / prefix_run.len())),
        ("alternating_runs_1m", alternating_runs.repeat(MIB / alternating_runs.len())),
        ("overtaken_labels_1m", overtaken_labels.repeat(MIB / overtaken_labels.len())),
    ]
}

fn bench_masking(c: &mut Criterion) {
    let masker = Masker::new(MaskConfig::new(MaskStrategy::TypeTag));
    let all = MaskSet::SECRETS | MaskSet::PII;
    // Compile the patterns outside the measurements.
    for set in [all, MaskSet::SECRETS, MaskSet::ALL] {
        black_box(masker.mask_text("warm up", set));
    }

    let mut group = c.benchmark_group("mask_text");
    for (name, size, dirty) in
        [("2k_clean", 2048, false), ("2k_dirty", 2048, true), ("64k_clean", 65536, false), ("64k_dirty", 65536, true)]
    {
        let text = text_of(size, dirty);
        group.throughput(Throughput::Bytes(text.len() as u64));
        group.bench_function(format!("{name}/secrets,pii"), |b| b.iter(|| masker.mask_text(black_box(&text), all)));
        if size == 2048 {
            group.bench_function(format!("{name}/secrets"), |b| {
                b.iter(|| masker.mask_text(black_box(&text), MaskSet::SECRETS))
            });
            group
                .bench_function(format!("{name}/all"), |b| b.iter(|| masker.mask_text(black_box(&text), MaskSet::ALL)));
        }
    }
    group.finish();

    // Adversarial text, 1 MiB each: runs that keep the lazy DFA building states (base64, capitals and dashes,
    // digits and dots), a fuzzer's worst input, provider keywords on every line, the two shapes that were
    // quadratic; and the gitleaks corpus.
    let mut group = c.benchmark_group("mask_text_adversarial");
    group.sample_size(10);
    for (name, text) in adversarial_texts() {
        group.throughput(Throughput::Bytes(text.len() as u64));
        group.bench_function(format!("{name}/secrets,pii"), |b| b.iter(|| masker.mask_text(black_box(&text), all)));
        group.bench_function(format!("{name}/secrets"), |b| {
            b.iter(|| masker.mask_text(black_box(&text), MaskSet::SECRETS))
        });
    }
    group.finish();
    for (name, text) in [("short_none", "order shipped on 2024-05-01"), ("short_email", "jane@example.com")] {
        c.bench_function(&format!("mask_text/{name}"), |b| b.iter(|| masker.mask_text(black_box(text), all)));
    }
    let dirty = text_of(2048, true);
    let masked = masker.mask_text(&dirty, all).into_owned();
    c.bench_function("detect/2k_dirty", |b| b.iter(|| masker.detect(black_box(&dirty), all)));
    c.bench_function("detect/2k_dirty_masked", |b| b.iter(|| masker.detect(black_box(&masked), all)));

    let hashed = Masker::new(MaskConfig::new(MaskStrategy::KeyedHash(
        HashKey::new("bench", &[42; 32]).unwrap_or_else(|e| panic!("{e}")),
    )));
    let text = text_of(2048, true);
    c.bench_function("mask_text/2k_dirty/keyed_hash", |b| b.iter(|| hashed.mask_text(black_box(&text), all)));

    let records: Vec<serde_json::Value> = (0..8)
        .map(|i| {
            serde_json::json!({
                "id": 123_456_000 + i,
                "email": format!("user{i}@example.com"),
                "phone": "4155552671",
                "card_number": 4_111_111_111_111_111_u64,
                "created": 1_700_000_000 + i,
                "version": "10.0.1.2",
                "tags": ["vip", "newsletter"],
                "notes": "Prefers e-mail; last order shipped on 2024-05-01, invoice #123456789.",
            })
        })
        .collect();
    let value = serde_json::Value::Array(records);
    c.bench_function("mask_value/2k_records", |b| {
        b.iter_batched(|| value.clone(), |mut v| masker.mask_value(&mut v, all), criterion::BatchSize::SmallInput)
    });
}

criterion_group!(benches, bench_masking);
criterion_main!(benches);
