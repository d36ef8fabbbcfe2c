"""Training losses for the small models the project trains and fine-tunes (`objectives`)."""
