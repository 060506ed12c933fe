#pragma once

#include <cstddef>
#include <string>

namespace tlstune {

/*
 * The canonical encoding of a Name, from its DER, without OpenSSL: what x509_name_canon
 * makes (3.0 and 3.5 alike) and X509_NAME_cmp compares, by length and then bytes
 * (X509_NAME_hash is its SHA-1). Each RDN's SET, every string value as UTF8String,
 * trimmed, each run of white space one space, ASCII in lower case.
 *
 * Only for names that d2i_X509_NAME is sure to decode and that are simple to follow: one
 * attribute per RDN, an object identifier as c2i_ASN1_OBJECT takes it, a value of
 * UTF8String (well formed), PrintableString, T61String, IA5String or NumericString, and
 * at most 64 KiB. False for anything else; the caller then asks OpenSSL.
 */
bool canonicalName(const unsigned char *der, std::size_t length, std::string *canon);

} /* namespace tlstune */
