/*
 * Writes tlstune(1) from its template, with the ENVIRONMENT section made from the one
 * table of TLSTUNE_* variables, so the page cannot drift from what the library accepts.
 * Usage: man_page TEMPLATE OUTPUT
 */

#include <fstream>
#include <iostream>
#include <sstream>

#include "core/config.h"

namespace {

/* Troff: a leading dot or quote would start a request; backslashes escape. */
std::string escape(const std::string &text)
{
	std::string out;
	for (char c : text) {
		if (c == '\\')
			out += "\\e";
		else if (c == '-')
			out += "\\-";
		else
			out += c;
	}
	return out;
}

} /* namespace */

int main(int argc, char **argv)
{
	if (argc != 3) {
		std::cerr << "usage: man_page TEMPLATE OUTPUT\n";
		return 2;
	}
	std::ifstream in(argv[1]);
	std::stringstream page;
	page << in.rdbuf();

	std::string environment;
	for (const tlstune::OptionInfo &option : tlstune::optionTable()) {
		environment += ".TP\n.B " + std::string(option.name) + "\n" + escape(option.help) +
			       "\nAccepted: " + escape(option.accepted) + ". Default: " +
			       escape(option.defaultValue) + ".\n";
	}
	if (!environment.empty())
		environment.pop_back();

	std::string text = page.str();
	const std::string marker = "@ENVIRONMENT@";
	std::string::size_type at = text.find(marker);
	if (at == std::string::npos) {
		std::cerr << "man_page: the template has no " << marker << "\n";
		return 1;
	}
	text.replace(at, marker.size(), environment);
	std::ofstream(argv[2]) << text;
	return 0;
}
