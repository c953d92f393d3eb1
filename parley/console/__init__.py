"""The discussion console (``parley console``): a full-screen terminal on one room."""
