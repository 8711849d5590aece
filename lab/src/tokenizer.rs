//! The toy CLIP's `tokenizer.json`: a CLIP-style byte-level BPE in the `tokenizers` format, trained here
//! (deterministically) on the toy captions so that every caption word is one token.
//!
//! It mirrors `openai/clip-vit-base-patch32`'s `tokenizer.json` (transformers' `CLIPTokenizerFast`): normalizer NFC,
//! whitespace runs → one space, lowercase; CLIP's split regex then byte-level symbols; BPE with `</w>` marking a
//! word's end and `<|endoftext|>` as the unknown token. Ids: the 256 byte symbols in GPT-2's `bytes_to_unicode`
//! order, the same 256 with `</w>`, one id per merge, then `<|startoftext|>` and `<|endoftext|>` last (as CLIP's
//! 49406/49407). Any text encodes without unknown tokens (words outside the toy vocabulary fall back to byte
//! symbols). The context length (77) and padding are applied by `clip::tokenizer`, not here.

use std::collections::BTreeMap;

use serde_json::{json, Map, Value};

use crate::caption::all_captions;
use clipsculpt::clip::tokenizer::{BOS, CLIP_SPLIT, END_OF_WORD, EOS};

/// The toy tokenizer as `tokenizer.json` text (deterministic: the same bytes on every run).
pub fn toy_tokenizer_json() -> String {
    let words = word_counts(&all_captions());
    let merges = train_bpe(&words);
    let mut vocab: Vec<String> = byte_symbols().into_iter().map(String::from).collect();
    let with_suffix: Vec<String> = vocab.iter().map(|s| format!("{s}{END_OF_WORD}")).collect();
    vocab.extend(with_suffix);
    vocab.extend(merges.iter().map(|(a, b)| format!("{a}{b}")));
    let (bos, eos) = (vocab.len(), vocab.len() + 1);
    vocab.extend([BOS.to_string(), EOS.to_string()]);
    let vocab: Map<String, Value> = vocab
        .into_iter()
        .enumerate()
        .map(|(id, tok)| (tok, json!(id)))
        .collect();
    let merges: Vec<String> = merges.iter().map(|(a, b)| format!("{a} {b}")).collect();
    let added = |id: usize, content: &str| {
        json!({"id": id, "content": content, "single_word": false, "lstrip": false, "rstrip": false,
               "normalized": true, "special": true})
    };
    let doc = json!({
        "version": "1.0",
        "truncation": null,
        "padding": null,
        "added_tokens": [added(bos, BOS), added(eos, EOS)],
        "normalizer": {"type": "Sequence", "normalizers": [
            {"type": "NFC"},
            {"type": "Replace", "pattern": {"Regex": r"\s+"}, "content": " "},
            {"type": "Lowercase"}
        ]},
        "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
            {"type": "Split", "pattern": {"Regex": CLIP_SPLIT}, "behavior": "Removed", "invert": true},
            {"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true, "use_regex": false}
        ]},
        "post_processor": {"type": "RobertaProcessing", "sep": [EOS, eos], "cls": [BOS, bos],
                           "trim_offsets": false, "add_prefix_space": false},
        "decoder": {"type": "ByteLevel", "add_prefix_space": true, "trim_offsets": true, "use_regex": true},
        "model": {"type": "BPE", "dropout": null, "unk_token": EOS, "continuing_subword_prefix": "",
                  "end_of_word_suffix": END_OF_WORD, "fuse_unk": false, "byte_fallback": false,
                  "ignore_merges": false, "vocab": vocab, "merges": merges}
    });
    // ok: a json! value of strings and numbers always serialises.
    let text = serde_json::to_string_pretty(&doc);
    text.expect("serialising an in-memory JSON value cannot fail") // ok: in-memory value
}

/// Pieces of lowercase ASCII text as CLIP's regex splits them: letter runs, single digits, runs of other
/// non-space characters (enough for the toy captions, which are ASCII).
pub fn pre_tokenize(text: &str) -> Vec<String> {
    #[derive(PartialEq, Clone, Copy)]
    enum Class {
        Letter,
        Digit,
        Other,
    }
    let mut pieces: Vec<String> = Vec::new();
    let mut last: Option<Class> = None;
    for ch in text.to_lowercase().chars() {
        let class = match ch {
            c if c.is_whitespace() => {
                last = None;
                continue;
            }
            c if c.is_alphabetic() => Class::Letter,
            c if c.is_numeric() => Class::Digit,
            _ => Class::Other,
        };
        match pieces.last_mut() {
            Some(p) if last == Some(class) && class != Class::Digit => p.push(ch),
            _ => pieces.push(ch.to_string()),
        }
        last = Some(class);
    }
    pieces
}

/// GPT-2's `bytes_to_unicode` symbols in vocabulary order: the printable bytes as themselves, then the others
/// mapped to U+0100 onwards.
fn byte_symbols() -> Vec<char> {
    let printable = |b: u32| (33..=126).contains(&b) || (161..=172).contains(&b) || b >= 174;
    let mut symbols: Vec<char> = (0..256u32)
        .filter(|&b| printable(b))
        .filter_map(char::from_u32)
        .collect();
    let mut extra = 0;
    for b in 0..256u32 {
        if !printable(b) {
            symbols.extend(char::from_u32(256 + extra));
            extra += 1;
        }
    }
    symbols
}

/// The byte-level symbol of each byte (index = byte).
fn byte_to_symbol() -> Vec<char> {
    let printable = |b: u32| (33..=126).contains(&b) || (161..=172).contains(&b) || b >= 174;
    let mut extra = 0;
    (0..256u32)
        .map(|b| {
            let code = if printable(b) {
                b
            } else {
                extra += 1;
                255 + extra
            };
            // ok: codes are below U+0200, all valid scalar values.
            char::from_u32(code).unwrap_or('?')
        })
        .collect()
}

/// Pre-tokenized words of `texts` as byte-level symbol strings, with their counts (sorted, so deterministic).
fn word_counts(texts: &[String]) -> BTreeMap<String, usize> {
    let table = byte_to_symbol();
    let mut counts = BTreeMap::new();
    for text in texts {
        for piece in pre_tokenize(text) {
            let symbols: String = piece.bytes().map(|b| table[b as usize]).collect();
            *counts.entry(symbols).or_insert(0) += 1;
        }
    }
    counts
}

/// Byte-pair merges learned from `words` until every word is a single symbol: at each step the most frequent
/// adjacent pair (ties broken by the pair's text) is merged everywhere.
fn train_bpe(words: &BTreeMap<String, usize>) -> Vec<(String, String)> {
    let mut split: Vec<(Vec<String>, usize)> = words
        .iter()
        .map(|(w, &n)| {
            let mut symbols: Vec<String> = w.chars().map(String::from).collect();
            if let Some(last) = symbols.last_mut() {
                last.push_str(END_OF_WORD);
            }
            (symbols, n)
        })
        .collect();
    let mut merges = Vec::new();
    loop {
        let mut pairs: BTreeMap<(&str, &str), usize> = BTreeMap::new();
        for (symbols, n) in &split {
            for w in symbols.windows(2) {
                *pairs.entry((&w[0], &w[1])).or_insert(0) += n;
            }
        }
        // Highest count; among equal counts the smallest pair (BTreeMap order, then `max_by_key` keeps the last
        // maximum, so iterate in reverse).
        let Some(((a, b), _)) = pairs.iter().rev().max_by_key(|(_, &n)| n) else {
            break;
        };
        let (a, b) = (a.to_string(), b.to_string());
        for (symbols, _) in &mut split {
            let mut i = 0;
            while i + 1 < symbols.len() {
                if symbols[i] == a && symbols[i + 1] == b {
                    symbols[i].push_str(&b);
                    symbols.remove(i + 1);
                }
                i += 1;
            }
        }
        merges.push((a, b));
    }
    merges
}

#[cfg(test)]
mod tests {
    use std::str::FromStr;

    use tokenizers::Tokenizer;

    use super::*;

    fn load() -> Tokenizer {
        Tokenizer::from_str(&toy_tokenizer_json()).unwrap()
    }

    #[test]
    fn every_caption_word_is_one_known_token() {
        let tok = load();
        let eos = tok.token_to_id(EOS).unwrap();
        let bos = tok.token_to_id(BOS).unwrap();
        let size = tok.get_vocab_size(true) as u32;
        assert_eq!((bos, eos), (size - 2, size - 1));
        eprintln!("toy tokenizer: {size} tokens ({} merges)", size - 514);
        for caption in all_captions() {
            let enc = tok.encode(caption.as_str(), false).unwrap();
            let words = pre_tokenize(&caption);
            let expected: Vec<String> = words.iter().map(|w| format!("{w}{END_OF_WORD}")).collect();
            assert_eq!(enc.get_tokens(), expected.as_slice(), "{caption}");
            assert!(
                !enc.get_ids().contains(&eos),
                "unknown token in {caption:?}"
            );
        }
        // With special tokens: <|startoftext|> … <|endoftext|>, and case/whitespace are normalised.
        let enc = tok.encode("A  Red\tCUBE", true).unwrap();
        assert_eq!(enc.get_tokens(), [BOS, "a</w>", "red</w>", "cube</w>", EOS]);
    }

    #[test]
    fn unknown_words_fall_back_to_byte_symbols() {
        let tok = load();
        let eos = tok.token_to_id(EOS).unwrap();
        for text in ["a wooden chair!", "Ünïcode 42 ☃", "a red-ish cube's"] {
            let enc = tok.encode(text, false).unwrap();
            assert!(!enc.get_ids().is_empty(), "{text}");
            assert!(!enc.get_ids().contains(&eos), "unknown token in {text:?}");
        }
    }

    #[test]
    fn json_is_deterministic_and_byte_symbols_are_clip_s() {
        assert_eq!(toy_tokenizer_json(), toy_tokenizer_json());
        let symbols = byte_symbols();
        assert_eq!(symbols.len(), 256);
        // CLIP's vocab.json starts "!" = 0, '"' = 1 and maps the space byte to 'Ġ' (U+0120).
        assert_eq!((symbols[0], symbols[1]), ('!', '"'));
        assert_eq!(byte_to_symbol()[b' ' as usize], 'Ġ');
        assert_eq!(
            pre_tokenize("a 3d render, x"),
            ["a", "3", "d", "render", ",", "x"]
        );
    }
}
