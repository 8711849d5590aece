//! shap_e (work in progress).
