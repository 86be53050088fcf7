"""Result pages: the small records of a finished run (`records`), a dataset's report and significance (`report`), the results page (`results`), the paper's published numbers (`paper`)."""
