//! Bounded pieces of text for messages: [`clip`] and [`some_of`].

/// At most `max` characters of `text`, with `…` when it was cut: for text
/// from an index or a guest quoted in a message.
pub fn clip(text: &str, max: usize) -> String {
    let mut out: String = text.chars().take(max).collect();
    if out.len() < text.len() {
        out.push('…');
    }
    out
}

/// `items` joined with `separator`, at most `shown` of them, then how many
/// more there are: a bounded list for a message.
pub fn some_of<S: AsRef<str>>(items: &[S], shown: usize, separator: &str) -> String {
    let mut out = items
        .iter()
        .take(shown)
        .map(AsRef::as_ref)
        .collect::<Vec<_>>()
        .join(separator);
    if items.len() > shown {
        out.push_str(&format!(" (and {} more)", items.len() - shown));
    }
    out
}
