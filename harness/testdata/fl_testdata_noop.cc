// A program that does nothing: what one run costs beside the program (ci/overhead.py, the
// runner benchmark) is measured on it.
int main() { return 0; }
