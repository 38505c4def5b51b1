"""Downloads from the Hugging Face Hub into the standard HF cache, with resume, verification and progress."""
