//! An error and its sources as one line, the way every front end shows a failure.

/// `error` and its sources, `: `-separated; a source whose text the error directly enclosing
/// it already shows is not repeated (many errors quote their source in their own message).
/// Only that one enclosing layer is compared: a short source ("denied", "timeout") that
/// happens to occur somewhere further up is still a layer of its own, and is shown.
pub fn error_chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut enclosing = text.clone();
    let mut next = error.source();
    while let Some(source) = next {
        let part = source.to_string();
        if !enclosing.contains(&part) {
            text.push_str(": ");
            text.push_str(&part);
        }
        enclosing = part;
        next = source.source();
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, thiserror::Error)]
    #[error("{text}")]
    struct Layer {
        text: &'static str,
        #[source]
        source: Option<Box<Layer>>,
    }

    fn layers(texts: &[&'static str]) -> Layer {
        let mut error: Option<Box<Layer>> = None;
        for text in texts.iter().rev() {
            error = Some(Box::new(Layer {
                text,
                source: error,
            }));
        }
        *error.expect("at least one layer")
    }

    #[test]
    fn every_source_is_shown_once() {
        assert_eq!(error_chain(&layers(&["top"])), "top");
        assert_eq!(
            error_chain(&layers(&["cannot start", "no such file"])),
            "cannot start: no such file"
        );
        // A source the message already quotes is not repeated; the ones below it still are.
        assert_eq!(
            error_chain(&layers(&["read x: denied", "denied", "EACCES"])),
            "read x: denied: EACCES"
        );
        // Only the directly enclosing error is compared: "timeout" occurs in the top message,
        // but not in "lock busy", which wraps it, so it is a layer of its own and shown.
        assert_eq!(
            error_chain(&layers(&[
                "timeout waiting for the store",
                "lock busy",
                "timeout"
            ])),
            "timeout waiting for the store: lock busy: timeout"
        );
        // A layer quoting its source hides it even when the layer itself was hidden.
        assert_eq!(error_chain(&layers(&["a: b: c", "b: c", "c"])), "a: b: c");
    }
}
