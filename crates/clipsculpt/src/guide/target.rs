//! What guidance aims at: the prompt's CLIP text embedding, optionally contrasted against
//! negative prompts.
//!
//! With negatives `n₁…n_k` and CLIP's logit scale `s`, the CLIP term of one view with unit image
//! embedding `e` is
//! `−cos(e, t) + c · CE/s`, where `CE = −log softmax(s·[cos(e, t), cos(e, n₁), …])₀` is CLIP's
//! own zero-shot classification loss of the prompt against the negatives (dividing by `s` keeps it
//! on the scale of a cosine). The bare cosine rewards whatever the prompt's embedding is close to,
//! which for a shape-and-colour prompt is mostly the colour; the contrastive part rewards what
//! tells the prompt apart from its neighbours ("a green sphere" vs "a green cube"), which is what
//! a wrong shape needs. Without negatives (or with `c = 0`) the term is the bare cosine.

use candle_core::{Result, Tensor, D};

use crate::clip::ClipScorer;

/// Whether two prompts are the same, ignoring case and surrounding blanks (a negative equal to
/// the prompt is dropped).
pub fn same_prompt(a: &str, b: &str) -> bool {
    a.trim().to_lowercase() == b.trim().to_lowercase()
}

/// A negative whose text embedding has at least this cosine with the prompt's is taken for a
/// paraphrase of it and dropped: contrasting a prompt against its own paraphrase penalises the
/// right object.
pub(crate) const PARAPHRASE_COSINE: f32 = 0.95;

/// The prompt and its negatives as unit text embeddings.
#[derive(Debug, Clone)]
pub struct Target {
    /// The prompt.
    prompt: String,
    /// `(1, D)`.
    text: Tensor,
    /// `(k, D)`, `None` without negatives.
    negatives: Option<Tensor>,
    /// CLIP's logit scale `s`.
    scale: f64,
    /// Weight `c` of the contrastive part.
    contrast: f64,
}

/// One evaluation of the CLIP term.
#[derive(Debug, Clone)]
pub(crate) struct ClipTerm {
    /// The loss (scalar, lower is better; differentiable when the embeddings are).
    pub(crate) loss: Tensor,
    /// Mean cosine to the prompt (scalar).
    pub(crate) cosine: Tensor,
}

/// The rows of `embeds (k, D)` (unit embeddings of `names`) whose cosine with `text (1, D)` is
/// below [`PARAPHRASE_COSINE`]; `None` when none is.
fn drop_paraphrases(text: &Tensor, names: &[&str], embeds: &Tensor) -> Result<Option<Tensor>> {
    let cos = embeds.matmul(&text.t()?)?.flatten_all()?.to_vec1::<f32>()?;
    let mut keep = Vec::new();
    for (i, (&c, name)) in cos.iter().zip(names).enumerate() {
        if c >= PARAPHRASE_COSINE {
            tracing::info!("negative {name:?} dropped: a paraphrase of the prompt (cosine {c:.3})");
        } else {
            keep.push(i as u32);
        }
    }
    if keep.is_empty() {
        return Ok(None);
    }
    let idx = Tensor::new(keep.as_slice(), embeds.device())?;
    Ok(Some(embeds.index_select(&idx, 0)?))
}

impl Target {
    /// Embeds `prompt` and `negatives` with `scorer`; negatives equal to the prompt (ignoring case
    /// and surrounding blanks), paraphrases of it ([`PARAPHRASE_COSINE`]) or empty are dropped
    /// (with a log line naming the paraphrases). `contrast` is the weight `c`.
    pub fn new(
        scorer: &ClipScorer,
        prompt: &str,
        negatives: &[String],
        contrast: f64,
    ) -> anyhow::Result<Self> {
        let text = scorer.embed_texts(&[prompt])?;
        let kept: Vec<&str> = negatives
            .iter()
            .map(|n| n.trim())
            .filter(|n| !n.is_empty() && !same_prompt(n, prompt))
            .collect();
        let negatives = if kept.is_empty() || contrast == 0.0 {
            None
        } else {
            drop_paraphrases(&text, &kept, &scorer.embed_texts(&kept)?)?
        };
        let scale = f64::from(scorer.logit_scale()?);
        Ok(Self::from_embeddings(
            prompt, text, negatives, scale, contrast,
        ))
    }

    /// A target from unit embeddings: `text (1, D)`, `negatives (k, D)`, logit scale `scale`.
    pub(crate) fn from_embeddings(
        prompt: &str,
        text: Tensor,
        negatives: Option<Tensor>,
        scale: f64,
        contrast: f64,
    ) -> Self {
        Self {
            prompt: prompt.to_string(),
            text,
            negatives: negatives.filter(|_| contrast != 0.0),
            scale,
            contrast,
        }
    }

    /// The prompt.
    pub(crate) fn prompt(&self) -> &str {
        &self.prompt
    }

    /// Number of negatives in use.
    pub fn negatives(&self) -> usize {
        self.negatives
            .as_ref()
            .and_then(|n| n.dim(0).ok())
            .unwrap_or(0)
    }

    /// The CLIP term averaged over unit image embeddings `emb (V, D)`.
    pub(crate) fn term(&self, emb: &Tensor) -> Result<ClipTerm> {
        let cos = emb.matmul(&self.text.t()?)?; // (V, 1)
        let cosine = cos.mean_all()?;
        let mut loss = cosine.neg()?;
        if let Some(neg) = &self.negatives {
            let all = (Tensor::cat(&[&cos, &emb.matmul(&neg.t()?)?], 1)? * self.scale)?;
            let max = all.max_keepdim(D::Minus1)?.detach();
            let lse = (all
                .broadcast_sub(&max)?
                .exp()?
                .sum_keepdim(D::Minus1)?
                .log()?
                + max)?;
            let ce = (lse - all.narrow(1, 0, 1)?)?.mean_all()?;
            loss = (loss + (ce * (self.contrast / self.scale))?)?;
        }
        Ok(ClipTerm { loss, cosine })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::{Device, Var};

    fn unit(v: &[f32]) -> Tensor {
        let n = v.iter().map(|x| x * x).sum::<f32>().sqrt();
        let v: Vec<f32> = v.iter().map(|x| x / n).collect();
        Tensor::from_vec(v, (1, 3), &Device::Cpu).unwrap()
    }

    /// Without negatives the term is −cos; with negatives it adds c·CE/s, where
    /// CE = log(Σ exp(s·cosᵢ)) − s·cos₀ (here checked by hand), and its gradient pushes the image
    /// away from the negative that it resembles.
    #[test]
    fn contrastive_term_matches_its_formula() -> Result<()> {
        let (t, n) = (unit(&[1.0, 0.0, 0.0]), unit(&[0.0, 1.0, 0.0]));
        let e = unit(&[0.6, 0.8, 0.0]); // cos to t 0.6, to n 0.8
        let bare = Target::from_embeddings("t", t.clone(), None, 10.0, 1.0).term(&e)?;
        assert!((bare.loss.to_scalar::<f32>()? + 0.6).abs() < 1e-6);
        let target = Target::from_embeddings("t", t, Some(n), 10.0, 0.5);
        let term = target.term(&e)?;
        let ce = ((6f64).exp() + (8f64).exp()).ln() - 6.0;
        let want = -0.6 + 0.5 * ce / 10.0;
        assert!((term.loss.to_scalar::<f32>()? as f64 - want).abs() < 1e-5);
        assert!((term.cosine.to_scalar::<f32>()? - 0.6).abs() < 1e-6);
        // d loss / d e: more of the prompt direction, less of the negative's.
        let var = Var::from_tensor(&e)?;
        let g = target.term(var.as_tensor())?.loss.backward()?;
        let g = g
            .get(&var)
            .map(|g| g.flatten_all().and_then(|g| g.to_vec1::<f32>()));
        let g = g.ok_or_else(|| candle_core::Error::Msg("no gradient".into()))??;
        assert!(g[0] < 0.0 && g[1] > 0.0, "{g:?}");
        Ok(())
    }
}
