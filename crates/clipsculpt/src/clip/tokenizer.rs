//! CLIP tokenization through the `tokenizers` crate: the model's `tokenizer.json`, or, where only
//! `vocab.json` + `merges.txt` exist, the byte-level BPE that transformers' `CLIPTokenizer` builds
//! (`models/clip/tokenization_clip.py`): NFC, whitespace runs → one space, lowercase; CLIP's split
//! regex; byte-level symbols; `</w>` marks a word's end.
//!
//! A prompt becomes `<|startoftext|> tokens… <|endoftext|>` padded to the context length (77) with
//! the pad token, as `tokenizer(..., padding="max_length", truncation=True)` does. Longer prompts
//! are cut to fit with a warning, and the cut is reported.

use std::path::Path;

use candle_core::{Device, Tensor};
use serde_json::Value;
use tokenizers::models::bpe::BPE;
use tokenizers::normalizers::{Lowercase, Replace, Sequence as NormSeq, NFC};
use tokenizers::pre_tokenizers::byte_level::ByteLevel;
use tokenizers::pre_tokenizers::sequence::Sequence as PreSeq;
use tokenizers::pre_tokenizers::split::Split;
use tokenizers::{SplitDelimiterBehavior, Tokenizer};

use super::error::{LoadError, TokenizeError};

/// CLIP's pre-tokenizer pattern (the `pat` of OpenAI's `simple_tokenizer.py`).
pub const CLIP_SPLIT: &str =
    r"<\|startoftext\|>|<\|endoftext\|>|'s|'t|'re|'ve|'m|'ll|'d|[\p{L}]+|[\p{N}]|[^\s\p{L}\p{N}]+";
/// Start-of-text token.
pub const BOS: &str = "<|startoftext|>";
/// End-of-text token (also the unknown and, by default, the padding token).
pub const EOS: &str = "<|endoftext|>";
/// Marks the last symbol of a word in CLIP's BPE.
pub const END_OF_WORD: &str = "</w>";
/// Vocabularies smaller than this are toy vocabularies ([`ClipTokenizer::unknown_words`]); CLIP's
/// has 49,408 tokens.
pub(crate) const SMALL_VOCABULARY: usize = 10_000;

/// One tokenized prompt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tokens {
    /// `context` ids: bos, tokens, eos, padding.
    pub ids: Vec<u32>,
    /// Whether tokens were cut to fit the context.
    pub(crate) truncated: bool,
}

/// A CLIP tokenizer with its special ids and context length.
#[derive(Debug, Clone)]
pub struct ClipTokenizer {
    tokenizer: Tokenizer,
    context: usize,
    bos: u32,
    eos: u32,
    pad: u32,
}

/// Reads a `tokenizer.json`. The file is checked to be JSON first, and the `tokenizers` library's parse runs behind
/// `catch_unwind`: it panics (`expect("Helper")`) on some malformed `decoder` sections instead of returning an error
/// (found by the `tokenizer` fuzz target).
fn read_tokenizer_json(path: &Path) -> Result<Tokenizer, String> {
    let bytes = std::fs::read(path).map_err(|e| e.to_string())?;
    serde_json::from_slice::<serde_json::Value>(&bytes)
        .map_err(|e| format!("not valid JSON: {e}"))?;
    std::panic::catch_unwind(|| Tokenizer::from_bytes(&bytes))
        .map_err(|_| "the tokenizers library could not parse it (it panicked)".to_string())?
        .map_err(|e| e.to_string())
}

impl ClipTokenizer {
    /// Loads `tokenizer.json`, else `vocab.json` + `merges.txt`, from `dir`; the special tokens come
    /// from `tokenizer_config.json` when present, their ids from the vocabulary. Without that file
    /// the pad id is `config.json`'s explicit `pad_token_id` (in `text_config` or at the top), else
    /// `<|endoftext|>`. `context` is the model's `max_position_embeddings`.
    pub fn from_dir(dir: &Path, context: usize) -> Result<Self, LoadError> {
        let fail = |reason: String| LoadError::Tokenizer {
            dir: dir.to_path_buf(),
            reason,
        };
        let json = dir.join("tokenizer.json");
        let (vocab, merges) = (dir.join("vocab.json"), dir.join("merges.txt"));
        let tokenizer = if json.is_file() {
            read_tokenizer_json(&json).map_err(|e| fail(format!("{}: {e}", json.display())))?
        } else if vocab.is_file() && merges.is_file() {
            clip_bpe(&vocab, &merges).map_err(|e| fail(e.to_string()))?
        } else {
            return Err(fail(
                "found neither tokenizer.json nor vocab.json + merges.txt".into(),
            ));
        };
        let special_path = dir.join("tokenizer_config.json");
        let special = SpecialTokens::read(&special_path)?;
        let mut tok = Self::new(tokenizer, context, &special).map_err(fail)?;
        if !special_path.is_file() {
            if let Some(id) = config_pad_id(&dir.join("config.json"))? {
                if tok.tokenizer.id_to_token(id).is_none() {
                    return Err(fail(format!(
                        "config.json's pad_token_id {id} is not in the vocabulary"
                    )));
                }
                tok.pad = id;
            }
        }
        Ok(tok)
    }

    /// Wraps a loaded tokenizer; errors name a special token missing from the vocabulary.
    pub fn new(
        mut tokenizer: Tokenizer,
        context: usize,
        special: &SpecialTokens,
    ) -> Result<Self, String> {
        if context < 2 {
            return Err(format!(
                "context length {context} leaves no room for bos and eos"
            ));
        }
        // Truncation and padding are ours; a tokenizer.json may carry its own.
        tokenizer.with_truncation(None).map_err(|e| e.to_string())?;
        tokenizer.with_padding(None);
        let id = |t: &str| {
            tokenizer
                .token_to_id(t)
                .ok_or_else(|| format!("special token {t:?} is not in the vocabulary"))
        };
        Ok(Self {
            bos: id(&special.bos)?,
            eos: id(&special.eos)?,
            pad: id(&special.pad)?,
            context,
            tokenizer,
        })
    }

    /// The words of `prompt` (lowercased letter runs) that a *small* vocabulary (under
    /// [`SMALL_VOCABULARY`] tokens, like the toy world's) has no whole-word token for: the text
    /// tower sees them only as letters it was never trained on. Empty for full-size vocabularies,
    /// which split rare words into pieces they were trained on.
    pub fn unknown_words(&self, prompt: &str) -> Vec<String> {
        if self.tokenizer.get_vocab_size(true) >= SMALL_VOCABULARY {
            return Vec::new();
        }
        let lower = prompt.to_lowercase();
        let mut unknown: Vec<String> = lower
            .split(|c: char| !c.is_alphabetic())
            .filter(|w| !w.is_empty())
            .filter(|w| {
                self.tokenizer
                    .token_to_id(&format!("{w}{END_OF_WORD}"))
                    .is_none()
            })
            .map(String::from)
            .collect();
        unknown.dedup();
        unknown
    }

    /// `(bos, eos, pad)` ids.
    #[cfg(test)]
    pub(crate) fn special_ids(&self) -> (u32, u32, u32) {
        (self.bos, self.eos, self.pad)
    }

    /// Tokenizes one prompt to exactly `context` ids; warns when it had to cut tokens.
    pub fn encode(&self, prompt: &str) -> Result<Tokens, TokenizeError> {
        let enc = self
            .tokenizer
            .encode(prompt, false)
            .map_err(|e| TokenizeError::Encode {
                prompt: prompt.to_string(),
                reason: e.to_string(),
            })?;
        let body = enc.get_ids();
        let room = self.context - 2;
        let truncated = body.len() > room;
        if truncated {
            tracing::warn!(
                "prompt {prompt:?} has {} tokens, more than CLIP's {room}; the last {} are dropped",
                body.len(),
                body.len() - room
            );
        }
        let mut ids = Vec::with_capacity(self.context);
        ids.push(self.bos);
        ids.extend_from_slice(&body[..body.len().min(room)]);
        ids.push(self.eos);
        ids.resize(self.context, self.pad);
        Ok(Tokens { ids, truncated })
    }

    /// Tokenizes prompts into `(batch, context)` u32 ids, with one truncation flag per prompt.
    pub fn encode_batch(
        &self,
        prompts: &[&str],
        device: &Device,
    ) -> Result<(Tensor, Vec<bool>), TokenizeError> {
        let mut ids = Vec::with_capacity(prompts.len() * self.context);
        let mut flags = Vec::with_capacity(prompts.len());
        for p in prompts {
            let t = self.encode(p)?;
            ids.extend(t.ids);
            flags.push(t.truncated);
        }
        let ids = Tensor::from_vec(ids, (prompts.len(), self.context), device)?;
        Ok((ids, flags))
    }
}

/// The JSON document in `path`; `None` when the file is absent.
fn read_json(path: &Path) -> Result<Option<Value>, LoadError> {
    if !path.is_file() {
        return Ok(None);
    }
    let text = std::fs::read_to_string(path).map_err(|source| LoadError::Io {
        path: path.to_path_buf(),
        source,
    })?;
    serde_json::from_str(&text)
        .map(Some)
        .map_err(|source| LoadError::Config {
            path: path.to_path_buf(),
            source,
        })
}

/// The `pad_token_id` written in a CLIP `config.json` (`text_config.pad_token_id`, else the
/// top-level one of a text-only config); `None` when the file or the key is absent.
fn config_pad_id(path: &Path) -> Result<Option<u32>, LoadError> {
    let Some(v) = read_json(path)? else {
        return Ok(None);
    };
    let id = v
        .get("text_config")
        .and_then(|t| t.get("pad_token_id"))
        .or_else(|| v.get("pad_token_id"))
        .and_then(Value::as_u64);
    Ok(id.and_then(|id| u32::try_from(id).ok()))
}

/// Names of the special tokens (transformers' `CLIPTokenizer` defaults unless overridden).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SpecialTokens {
    /// Start of text.
    pub(crate) bos: String,
    /// End of text (also the pooled token).
    pub(crate) eos: String,
    /// Padding.
    pub(crate) pad: String,
}

impl Default for SpecialTokens {
    fn default() -> Self {
        Self {
            bos: BOS.into(),
            eos: EOS.into(),
            pad: EOS.into(),
        }
    }
}

impl SpecialTokens {
    /// Reads `bos_token`, `eos_token` and `pad_token` (strings or `{"content": …}` objects) from a
    /// `tokenizer_config.json`; a missing file or key keeps the default.
    pub(crate) fn read(path: &Path) -> Result<Self, LoadError> {
        let mut special = Self::default();
        let Some(v) = read_json(path)? else {
            return Ok(special);
        };
        let token = |key: &str| match v.get(key) {
            Some(Value::String(s)) => Some(s.clone()),
            Some(Value::Object(o)) => o.get("content").and_then(Value::as_str).map(String::from),
            _ => None,
        };
        if let Some(t) = token("bos_token") {
            special.bos = t;
        }
        if let Some(t) = token("eos_token") {
            special.eos = t;
        }
        if let Some(t) = token("pad_token") {
            special.pad = t;
        }
        Ok(special)
    }
}

/// CLIP's byte-level BPE from `vocab.json` + `merges.txt`, built as transformers' `CLIPTokenizer`.
fn clip_bpe(vocab: &Path, merges: &Path) -> tokenizers::Result<Tokenizer> {
    let (vocab, merges) = (vocab.to_string_lossy(), merges.to_string_lossy());
    let bpe = BPE::from_file(&vocab, &merges)
        .continuing_subword_prefix(String::new())
        .end_of_word_suffix(END_OF_WORD.into())
        .unk_token(EOS.into())
        .build()?;
    let mut tokenizer = Tokenizer::new(bpe);
    tokenizer.with_normalizer(Some(NormSeq::new(vec![
        NFC.into(),
        Replace::new(
            tokenizers::normalizers::replace::ReplacePattern::Regex(r"\s+".into()),
            " ",
        )?
        .into(),
        Lowercase.into(),
    ])))?;
    tokenizer.with_pre_tokenizer(Some(PreSeq::new(vec![
        Split::new(
            tokenizers::pre_tokenizers::split::SplitPattern::Regex(CLIP_SPLIT.into()),
            SplitDelimiterBehavior::Removed,
            true,
        )?
        .into(),
        ByteLevel::new(false, true, false).into(),
    ])));
    tokenizer.with_decoder(Some(tokenizers::decoders::byte_level::ByteLevel::default()));
    Ok(tokenizer)
}
